package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// nodeTicks records which node delivered each tick, by actor key.
type nodeTicks struct {
	mu sync.Mutex
	by map[string][]string // key → node of each tick, in order
}

func (l *nodeTicks) add(key, node string) {
	l.mu.Lock()
	l.by[key] = append(l.by[key], node)
	l.mu.Unlock()
}

func (l *nodeTicks) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.by[key])
}

func (l *nodeTicks) lastNode(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.by[key]; len(s) > 0 {
		return s[len(s)-1]
	}
	return ""
}

type clusterBiller struct {
	biller
	node, key string
	ticks     *nodeTicks
}

// startBilling makes a clusterBiller register a reminder ticking every
// second; it is a declared message, so it may come from any node.
type startBilling struct{}

var startBillingMsg = tempest.CodecOf(0xBEEF01, "StartBilling",
	func(dst []byte, _ startBilling) ([]byte, error) { return dst, nil },
	func(b []byte) (startBilling, error) {
		if len(b) != 0 {
			return startBilling{}, errors.New("StartBilling has no body")
		}
		return startBilling{}, nil
	})

func (b *clusterBiller) Receive(ctx actor.Context, msg any) {
	switch msg.(type) {
	case reminders.Tick:
		b.ticks.add(b.key, b.node)
	case startBilling:
		if err := b.rem.Register(ctx, reminders.Reminder{Name: "r", Period: time.Second}); err != nil {
			ctx.ReplyError(err)
			return
		}
		ctx.Reply(startBilling{})
	}
}

// Reminders fire on whichever node owns their identity: they keep firing
// after their owner left (its shards handed off with their reminders)
// and after the whole cluster stopped and started again.
func TestClusterRemindersFollowTheirShard(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t)
	ticks := &nodeTicks{by: map[string][]string{}}
	c.register = func(n *tempest.Node) {
		rem, name := n.Reminders(), n.Name()
		if err := n.Register("biller", func(key string) actor.Actor {
			return &clusterBiller{biller: biller{rem: rem}, node: name, key: key, ticks: ticks}
		}, tempest.KindOptions{KindOptions: prospero.KindOptions{IdleTimeout: 500 * time.Millisecond},
			Messages: []tempest.Message{startBillingMsg}}); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"n1", "n2", "n3"}
	for _, name := range names {
		c.start(name, 3)
	}
	waitSettled(t, c, 30*time.Second, "three ready nodes with a settled table")
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.logs.String())
		}
	})
	n1 := c.node("n1")
	var keys, onN3 []string
	for k := 0; len(onN3) < 3 && k < 200; k++ {
		key := fmt.Sprintf("b%d", k)
		owner, _, err := n1.Locate(n1.Ref("biller", key))
		if err != nil {
			t.Fatal(err)
		}
		if owner == "n3" {
			onN3 = append(onN3, key)
		}
		if owner == "n3" || len(keys) < 6 {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		if _, err := n1.Ask(context.Background(), n1.Ref("biller", key), startBilling{}); err != nil {
			t.Fatalf("start billing %s: %v", key, err)
		}
	}
	allTick := func(when string, since map[string]int, notOn string) {
		t.Helper()
		why := ""
		waitFor(t, 20*time.Second, when, func() bool {
			for _, key := range keys {
				if ticks.count(key) < since[key]+2 {
					why = fmt.Sprintf("%s: %d ticks", key, ticks.count(key))
					return false
				}
				if notOn != "" && ticks.lastNode(key) == notOn {
					why = fmt.Sprintf("%s last ticked on %s", key, notOn)
					return false
				}
			}
			return true
		}, &why)
	}
	snapshot := func() map[string]int {
		m := map[string]int{}
		for _, key := range keys {
			m[key] = ticks.count(key)
		}
		return m
	}
	allTick("every reminder ticking", snapshot(), "")
	for _, key := range onN3 {
		if got := ticks.lastNode(key); got != "n3" {
			t.Fatalf("%s (owned by n3) ticked on %s", key, got)
		}
	}

	if err := c.remove("n3").Close(context.Background()); err != nil {
		t.Fatalf("graceful close of n3: %v", err)
	}
	waitSettled(t, c, 30*time.Second, "two nodes owning every shard")
	allTick("reminders of n3's shards ticking on their new owners", snapshot(), "n3")

	c.haltAll()
	c.mu.Lock()
	c.seed = ""
	c.mu.Unlock()
	for _, name := range []string{"n1", "n2"} {
		c.start(name, 2)
	}
	waitSettled(t, c, 30*time.Second, "the restarted cluster settled")
	allTick("reminders ticking after a full restart", snapshot(), "")
}
