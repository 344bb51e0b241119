package replica

import (
	"path/filepath"
	"testing"

	"github.com/tempest-actors/tempest/prospero"
)

// A background write's failure belongs to the node whose batch failed:
// another node's stream is not refused for it, the failed node's next
// batch is, and Flush reports it until then.
func TestBackgroundFailureGoesToItsOwnersStream(t *testing.T) {
	local, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Local: local})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// An identity without a kind cannot be stored: the batch fails in
	// the background, after it was acknowledged on receipt.
	bad := []Record{{Shard: Shard{Index: 1}, Replicated: prospero.Replicated{ID: prospero.Identity{Key: "x"}, Epoch: 1, Version: 1}}}
	if err := s.apply.later("a", bad); err != nil {
		t.Fatal(err)
	}
	s.apply.drain()
	if err := s.apply.failed("b"); err != nil {
		t.Fatalf("b's stream refused for a's failed batch: %v", err)
	}
	if err := s.Flush(); err == nil {
		t.Fatal("Flush returned nil though a batch acknowledged to a was not stored")
	}
	if err := s.apply.failed("a"); err == nil {
		t.Fatal("a's stream was not told that its acknowledged batch was not stored")
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush after a was told: %v", err)
	}
}
