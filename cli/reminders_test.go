package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/tempesttest"
)

// remindMe makes a pinger register its reminder "bill" (daily, catch-up
// up to 3) or "expire" (one-shot, a minute later) from due, in Unix
// seconds. It is a declared message, so it may come from any node.
type remindMe struct {
	name string
	due  int64
}

var remindMeMsg = tempest.CodecOf(0xBEEF51, "RemindMe",
	func(dst []byte, m remindMe) ([]byte, error) {
		return fmt.Appendf(dst, "%s %d", m.name, m.due), nil
	},
	func(b []byte) (remindMe, error) {
		var m remindMe
		_, err := fmt.Sscanf(string(b), "%s %d", &m.name, &m.due)
		return m, err
	})

// pinger registers reminders when asked; it ignores its ticks.
type pinger struct{ rem *tempest.Reminders }

func (p *pinger) Receive(ctx actor.Context, msg any) {
	m, ok := msg.(remindMe)
	if !ok {
		return
	}
	due := time.Unix(m.due, 0)
	r := reminders.Reminder{Name: m.name, Due: due, Period: 24 * time.Hour, Catchup: reminders.FireUpTo, MaxCatchup: 3}
	if m.name == "expire" {
		r = reminders.Reminder{Name: m.name, Due: due.Add(time.Minute)}
	}
	if err := p.rem.Register(ctx, r); err != nil {
		ctx.ReplyError(err)
		return
	}
	ctx.Reply(m)
}

// TestRemindersCommandAcrossNodes lists, shows and cancels the reminders
// of an identity with `tempest reminders` through a node that does not
// own it (which asks the owner over the federation protocol) and through
// the owner: the answers and the exit codes of the errors are the same.
func TestRemindersCommandAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("three-node cluster")
	}
	lns := map[string]net.Listener{}
	for _, name := range []string{"n1", "n2", "n3"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[name] = ln
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3,
		Configure: func(name string, cfg *tempest.Config) { cfg.Cluster.HTTPAddr = lns[name].Addr().String() },
		Register: func(n *tempest.Node) error {
			rem := n.Reminders()
			return n.Register("pinger", func(string) actor.Actor { return &pinger{rem: rem} },
				tempest.KindOptions{Messages: []tempest.Message{remindMeMsg}, Reminders: true})
		}})
	for name, ln := range lns {
		api, err := httpapi.New(httpapi.Config{Node: c.Node(name)})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: api.Handler()}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	// A key owned by n2, inspected through n1.
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("p%d", i)
		if c.Owner(actor.Virtual("pinger", key)).Name() == "n2" {
			break
		}
	}
	ref := actor.Virtual("pinger", key)
	due := time.Now().Add(time.Hour).Truncate(time.Second)
	for _, name := range []string{"bill", "expire"} {
		if _, err := c.Node("n1").Ask(t.Context(), ref, remindMe{name, due.Unix()}); err != nil {
			t.Fatalf("registering %s: %v", name, err)
		}
	}
	// Every command goes to n1 (not the owner) and to n2 (the owner);
	// run returns n1's answer once n2's is the same.
	via := func(n string) []string { return []string{"--addr", "http://" + lns[n].Addr().String()} }
	run := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := cli(t, append(args, via("n1")...)...)
		if strings.Contains(strings.Join(args, " "), "--cancel") {
			return out, err // not twice
		}
		out2, _, err2 := cli(t, append(args, via("n2")...)...)
		var e1, e2 *exitError
		switch {
		case out != out2:
			t.Errorf("%v: n1 printed %q, the owner n2 %q", args, out, out2)
		case (err == nil) != (err2 == nil) || errors.As(err, &e1) != errors.As(err2, &e2) || (e1 != nil && e1.code != e2.code):
			t.Errorf("%v: n1 answered %v, the owner n2 %v", args, err, err2)
		}
		return out, err
	}

	out, err := run("reminders", "pinger/"+key, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list httpapi.RemindersBody
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if list.Node != "n2" || list.Kind != "pinger" || list.Key != key || len(list.Reminders) != 2 {
		t.Fatalf("reminders on n2: %+v", list)
	}
	bill := list.Reminders[0]
	if bill.Name != "bill" || bill.Period != "24h0m0s" || bill.Catchup != "fire-up-to" || bill.MaxCatchup != 3 ||
		!bill.Due.Equal(due) || !bill.Next.Equal(due) || bill.LastSeq != 0 || bill.Outstanding {
		t.Errorf("bill: %+v", bill)
	}
	if e := list.Reminders[1]; e.Name != "expire" || e.Period != "" || e.Catchup != "fire-once" || !e.Next.Equal(due.Add(time.Minute)) {
		t.Errorf("expire: %+v", e)
	}

	out, err = run("reminders", "pinger/"+key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "pinger/"+key+" on n2: 2 reminders\n") || !strings.Contains(out, "  bill  every 24h0m0s, next ") ||
		!strings.Contains(out, "(catch-up fire-up-to 3, last seq 0)") || !strings.Contains(out, "  expire  once, next ") {
		t.Errorf("reminders printed:\n%s", out)
	}
	if out, err = run("reminders", "pinger/"+key, "expire", "--json"); err != nil {
		t.Fatal(err)
	}
	var one httpapi.ReminderBody
	if err := json.Unmarshal([]byte(out), &one); err != nil || one.Name != "expire" {
		t.Fatalf("one reminder: %q %v", out, err)
	}

	// Cancel; the owner's engine no longer holds it.
	if out, err := run("reminders", "pinger/"+key, "bill", "--cancel"); err != nil || out != "" {
		t.Fatalf("cancel: %q %v", out, err)
	}
	list2, err := c.Node("n2").Reminders().ListOf(t.Context(), ref)
	if err != nil || list2.Node != "n2" || len(list2.Reminders) != 1 || list2.Reminders[0].Name != "expire" {
		t.Fatalf("the owner holds %+v (%v) after the cancel", list2, err)
	}

	// Errors: an unknown reminder, one cancelled already (through the
	// owner too), an unknown kind, bad arguments.
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"reminders", "pinger/" + key, "nope"}, exitUnknownKind},
		{[]string{"reminders", "pinger/" + key, "bill", "--cancel"}, exitUnknownKind},
		{[]string{"reminders", "nokind/" + key}, exitUnknownKind},
		{[]string{"reminders", "pinger/" + key, "--cancel"}, exitUsage},
		{[]string{"reminders", "pinger"}, exitUsage},
		// A name no node would take is refused here, as a bad KIND/KEY is
		// (it used to reach the node and exit 7, the code for bad JSON).
		{[]string{"reminders", "pinger/" + key, strings.Repeat("n", 129), "--cancel"}, exitUsage},
		{[]string{"reminders", "pinger/" + key, "\xff"}, exitUsage},
	} {
		_, err := run(tc.args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != tc.code {
			t.Errorf("%v: %v, want exit %d", tc.args, err, tc.code)
		}
	}
	_, _, err = cli(t, append([]string{"reminders", "pinger/" + key, "bill", "--cancel"}, via("n2")...)...)
	if ee := (*exitError)(nil); !errors.As(err, &ee) || ee.code != exitUnknownKind {
		t.Errorf("cancelling a cancelled reminder through its owner: %v, want exit %d", err, exitUnknownKind)
	}
}
