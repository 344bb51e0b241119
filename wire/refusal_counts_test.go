package wire

import "testing"

func TestRefusalCountsNameEveryReason(t *testing.T) {
	var c RefusalCounts
	for i := range c {
		c[i] = uint64(10 + i)
	}
	named := map[RefusedReason]uint64{
		RefusedReasonMailboxFull:           c.MailboxFull(),
		RefusedReasonNodeOverloaded:        c.NodeOverloaded(),
		RefusedReasonUnknownKind:           c.UnknownKind(),
		RefusedReasonExpired:               c.Expired(),
		RefusedReasonTerminatedIncarnation: c.TerminatedIncarnation(),
		RefusedReasonNotOwner:              c.NotOwner(),
		RefusedReasonCallChainTooLong:      c.CallChainTooLong(),
		RefusedReasonNotServing:            c.NotServing(),
		RefusedReasonBusy:                  c.Busy(),
	}
	if len(named) != len(c) {
		t.Fatalf("%d named counters for %d reasons", len(named), len(c))
	}
	for r, got := range named {
		if got != uint64(10+r) || c.Of(r) != got {
			t.Errorf("%v: named %d, Of %d, want %d", r, got, c.Of(r), 10+r)
		}
	}
	if c.Of(RefusedReason(99)) != 0 {
		t.Error("an unknown reason has a count")
	}
}
