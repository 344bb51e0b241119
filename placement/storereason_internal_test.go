package placement

import (
	"strings"
	"testing"
)

// A store failure's reason reaches the table exactly as the node keeps
// it, so the node does not propose it again and again, and it is never
// refused as too long after raft's JSON grew it.
func TestStoreReasonSurvivesRaft(t *testing.T) {
	for _, raw := range []string{
		"state store writes failing since 2026-12-06T21:00:00Z: write /data/\xe9t\xe9/state.db: no space left on device",
		strings.Repeat("\xff", 200) + "no space",
		strings.Repeat("é", 200), // cut inside a rune at 256 bytes
		"",
	} {
		r := storeReason(raw)
		b, err := Command{Op: OpStore, Name: "d", Failing: r}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		c, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		if c.Failing != r || len(r) > maxFailingLen {
			t.Fatalf("reason %q became %q (%d bytes) through raft", r, c.Failing, len(c.Failing))
		}
		tb := NewTable()
		tb.Nodes["d"] = &NodeInfo{Name: "d", Status: StatusUp}
		if res := tb.Apply(c); res.Err != nil {
			t.Fatalf("reason %q refused: %v", r, res.Err)
		}
	}
}
