package placement_test

import (
	"testing"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// TestWALTailTruncationSurvivesReopen: raft truncates a follower's log
// tail when a new leader did not commit its last entries. The log must
// still read back in full after a restart (raft-wal v0.4.0 marked the
// tail segment sealed without its index block, and every entry of it then
// failed to read: third_party/raft-wal/PATCHES.md).
func TestWALTailTruncationSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	open := func() (*raftwal.WAL, *metadb.BoltMetaDB) {
		t.Helper()
		meta := &metadb.BoltMetaDB{}
		w, err := raftwal.Open(dir, raftwal.WithMetaStore(meta))
		if err != nil {
			t.Fatal(err)
		}
		return w, meta
	}
	w, meta := open()
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Data: []byte("entry")})
	}
	if err := w.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteRange(8, 10); err != nil { // the conflicting tail
		t.Fatal(err)
	}
	// The new leader's entries follow in the next segment.
	if err := w.StoreLogs([]*raft.Log{{Index: 8, Term: 2, Data: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	_ = meta.Close()

	w, meta = open()
	defer meta.Close()
	defer w.Close()
	if last, err := w.LastIndex(); err != nil || last != 8 {
		t.Fatalf("last index after the restart = %d, %v; want 8", last, err)
	}
	for i := uint64(1); i <= 8; i++ {
		var l raft.Log
		if err := w.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d after the restart: %v", i, err)
		}
		if want := uint64(1); i == 8 {
			want = 2
			if l.Term != want {
				t.Fatalf("entry 8 has term %d, want the new leader's %d", l.Term, want)
			}
		}
	}
	var gone raft.Log
	if err := w.GetLog(9, &gone); err == nil {
		t.Fatal("a truncated entry reads back after the restart")
	}
}
