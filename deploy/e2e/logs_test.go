package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func line(at time.Duration, msg, node, actor string) string {
	return fmt.Sprintf(`{"time":%q,"level":"INFO","msg":%q,"node":%q,"actor":%q,"incarnation":1,"epoch":3}`,
		t0.Add(at).Format(time.RFC3339Nano), msg, node, actor)
}

func TestOverlapsFindsDoubleActivation(t *testing.T) {
	n1 := strings.Join([]string{
		line(0, msgStarted, "n1", ""),
		line(1*time.Second, msgActivated, "n1", "counter/a"),
		line(5*time.Second, msgDeactivated, "n1", "counter/a"),
		line(6*time.Second, msgActivated, "n1", "counter/b"),
	}, "\n")
	n2 := strings.Join([]string{
		"banner text that is not JSON",
		line(0, msgStarted, "n2", ""),
		line(5*time.Second+time.Millisecond, msgActivated, "n2", "counter/a"), // after n1 let go: fine
		line(7*time.Second, msgActivated, "n2", "counter/b"),                  // n1 still has b: overlap
	}, "\n")
	end := t0.Add(10 * time.Second)
	spans := append(activationSpans("n1", n1, nil, end), activationSpans("n2", n2, nil, end)...)
	got := overlaps(spans)
	if len(got) != 1 || got[0].actor != "counter/b" || got[0].by != 3*time.Second {
		t.Fatalf("overlaps = %v, want counter/b by 3s", got)
	}
}

func TestCrashEndsOpenSpans(t *testing.T) {
	n1 := strings.Join([]string{
		line(0, msgStarted, "n1", ""),
		line(1*time.Second, msgActivated, "n1", "counter/a"),
		// killed at 2s; restarted at 20s
		line(20*time.Second, msgStarted, "n1", ""),
	}, "\n")
	n2 := line(8*time.Second, msgActivated, "n2", "counter/a")
	end := t0.Add(30 * time.Second)
	spans := append(activationSpans("n1", n1, []time.Time{t0.Add(2 * time.Second)}, end),
		activationSpans("n2", n2, nil, end)...)
	if got := overlaps(spans); len(got) != 0 {
		t.Fatalf("a killed node's activation overlaps: %v", got)
	}
	// Without the crash time, the span runs to the restart and overlaps.
	spans = append(activationSpans("n1", n1, nil, end), activationSpans("n2", n2, nil, end)...)
	if got := overlaps(spans); len(got) != 1 {
		t.Fatalf("overlaps = %v, want one", got)
	}
}

func TestCrashStartFindsTheFailingGoroutine(t *testing.T) {
	out := "{\"msg\":\"node started\"}\npanic: runtime error: index out of range\n\ngoroutine 7 [running]:\nmain.f()\n"
	i := crashStart(out)
	if i < 0 || !strings.HasPrefix(out[i:], "panic: runtime error") {
		t.Fatalf("crashStart = %d, want the start of the panic line", i)
	}
	if crashStart("{\"msg\":\"panic: in a message\"}\n") >= 0 {
		t.Fatal("a log line that mentions panic is not a crash")
	}
}

func TestOverlapWhileFrozen(t *testing.T) {
	n1 := strings.Join([]string{
		line(0, msgStarted, "n1", ""),
		line(1*time.Second, msgActivated, "n1", "counter/a"),
		line(1*time.Second, msgActivated, "n1", "counter/b"),
		// frozen from 2s to 20s; lets a go 0.4s after the thaw, b 3s after
		line(20*time.Second+400*time.Millisecond, msgDeactivated, "n1", "counter/a"),
		line(23*time.Second, msgDeactivated, "n1", "counter/b"),
	}, "\n")
	n2 := strings.Join([]string{
		line(5*time.Second, msgActivated, "n2", "counter/a"),
		line(5*time.Second, msgActivated, "n2", "counter/b"),
		line(1*time.Second+500*time.Millisecond, msgActivated, "n2", "counter/c"),
	}, "\n")
	n1c := line(1*time.Second, msgActivated, "n1", "counter/c") // overlaps c before the pause
	end := t0.Add(30 * time.Second)
	spans := append(activationSpans("n1", n1+"\n"+n1c, nil, end), activationSpans("n2", n2, nil, end)...)
	pauses := map[string][]frozen{"n1": {{from: t0.Add(2 * time.Second), to: t0.Add(20 * time.Second)}}}
	got := map[string]bool{}
	for _, o := range overlaps(spans) {
		ok, after := whileFrozen(o, pauses, time.Second)
		got[o.actor] = ok
		if o.actor == "counter/a" && after != 400*time.Millisecond {
			t.Errorf("a ended %s after the thaw, want 400ms", after)
		}
	}
	want := map[string]bool{"counter/a": true, "counter/b": false, "counter/c": false}
	for a, w := range want {
		if g, ok := got[a]; !ok || g != w {
			t.Errorf("%s: while frozen %v (found %v), want %v", a, g, ok, w)
		}
	}
}
