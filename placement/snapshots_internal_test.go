package placement

import (
	"os"
	"path/filepath"
	"testing"
)

// A snapshot raft left unfinished (a crash, or a write that failed on a
// full disk) is removed when the node starts: it is never read, and its
// room on the disk comes back.
func TestUnfinishedSnapshotIsRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, "2-1141-1796593938517.tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	index, err := verifySnapshots(dir)
	if err != nil || index != 0 {
		t.Fatalf("verifySnapshots = %d, %v; want 0, nil", index, err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the unfinished snapshot is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stray")); err != nil {
		t.Fatalf("a file that is not a snapshot was touched: %v", err)
	}
}
