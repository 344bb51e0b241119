package placement

import (
	"testing"

	"github.com/hashicorp/raft"
)

// The data IDs read from the log at open are expected until an entry at
// or after theirs is applied, and only while the log still holds their
// entry: a new leader may replace an uncommitted tail.
func TestLoggedDataIDs(t *testing.T) {
	f := NewFSM()
	apply := func(idx uint64, c Command) {
		t.Helper()
		b, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: b})
	}
	apply(1, Command{Op: OpDataID, Name: "b", DataID: "B1"})
	f.setLogged(map[string]loggedDataID{
		"a": {id: "A0", index: 1, term: 1}, // applied already: dropped
		"b": {id: "B2", index: 3, term: 2},
		"c": {id: "C1", index: 4, term: 2},
	})
	held := func(uint64, uint64) bool { return true }
	if got := f.dataIDOf("a", held); got != "" {
		t.Errorf("a: %q, want none (its entry was applied before)", got)
	}
	if got := f.dataIDOf("b", held); got != "B2" {
		t.Errorf("b before its entry is applied: %q, want the logged B2", got)
	}
	replaced := func(index, term uint64) bool { return index != 4 }
	if got := f.dataIDOf("c", replaced); got != "" {
		t.Errorf("c whose entry the log lost: %q, want none", got)
	}
	if got := f.dataIDOf("c", held); got != "" {
		t.Errorf("c after its logged record was dropped: %q, want none", got)
	}
	apply(3, Command{Op: OpSync, Name: "x", Nonce: "n"}) // another entry took index 3
	if got := f.dataIDOf("b", held); got != "B1" {
		t.Errorf("b once index 3 is applied: %q, want the table's B1", got)
	}
}
