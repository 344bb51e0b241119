package httpapi

import (
	"strings"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

// Activation events feed the activation-time histogram by kind and
// event; other events only count.
func TestMetricsActivationDuration(t *testing.T) {
	m := NewMetrics("test")
	m.SetKinds([]string{"counter"})
	id := prospero.Identity{Kind: "counter", Key: "a"}
	m.Event(prospero.Event{Type: prospero.EventHydrated, ID: id, Hydration: 3 * time.Millisecond})
	m.Event(prospero.Event{Type: prospero.EventHydrated, ID: id, Hydration: 5 * time.Millisecond})
	m.Event(prospero.Event{Type: prospero.EventPassivated, ID: id})
	m.Event(prospero.Event{Type: prospero.EventActivated, ID: prospero.Identity{Kind: "secret-kind", Key: "k"}, Hydration: time.Millisecond})

	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{} // "kind/event" -> sample count
	var sum float64
	for _, f := range families {
		if f.GetName() != "tempest_activation_duration_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["kind"]+"/"+labels["event"]] = metric.GetHistogram().GetSampleCount()
			if labels["kind"] == "counter" {
				sum += metric.GetHistogram().GetSampleSum()
			}
		}
	}
	want := map[string]uint64{"counter/Hydrated": 2, otherKind + "/Activated": 1}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d samples, want %d", k, got[k], n)
		}
	}
	if sum < 0.0079 || sum > 0.0081 {
		t.Errorf("sum of counter hydration times %v, want 0.008", sum)
	}
}

func TestPromNames(t *testing.T) {
	for in, want := range map[string]string{
		"lastContact":   "last_contact",
		"appendEntries": "append_entries",
		"getRPCType":    "get_rpc_type",
		"rpcType":       "rpc_type",
		"RPC":           "rpc",
		"fsm":           "fsm",
		"peer_id":       "peer_id",
		"v2Node":        "v2_node",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
	if got := counterKey([]string{"raft", "state", "leader"}); strings.Join(got, "_") != "raft_state_leader_total" {
		t.Errorf("counter key %v", got)
	}
	if got := counterKey([]string{"x", "total"}); strings.Join(got, "_") != "x_total" {
		t.Errorf("counter key %v", got)
	}
}

// Reminder lateness observations reach their histogram.
func TestMetricsReminderLateness(t *testing.T) {
	m := NewMetrics("test")
	m.ObserveReminderLateness(2 * time.Millisecond)
	m.ObserveReminderLateness(3 * time.Millisecond)
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "tempest_reminder_lateness_seconds" {
			if h := f.GetMetric()[0].GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() < 0.0049 || h.GetSampleSum() > 0.0051 {
				t.Fatalf("histogram count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
			}
			return
		}
	}
	t.Fatal("no tempest_reminder_lateness_seconds")
}
