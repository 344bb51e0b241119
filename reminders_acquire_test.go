package tempest_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/reminders"
)

// TestReminderLoadFailureLoggedOnce: a shard whose reminders cannot be
// loaded (its record at rest does not decode) is logged once while it
// keeps failing the same way, not once per pass of the reminder loop
// (a table change or a quarter second: hundreds of lines a second
// across the shards of a damaged store).
func TestReminderLoadFailureLoggedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := threeNodes(t)
	var keys []string
	tab := c.Node("n2").Table()
	for _, name := range []string{"n1", "n2", "n3"} {
		for _, s := range tab.Owned(name) {
			keys = append(keys, tempest.ReminderShardKey(s))
		}
	}
	// Every node's copy is damaged, so that whichever node owns a shard
	// after the restart (a shard of n1's may fail over and come back, and
	// a follower's copy may be caught up from its owner's) fails to load
	// it the same way.
	names := []string{"n1", "n2", "n3"}
	for _, name := range names {
		c.Kill(name)
	}
	for _, name := range names {
		path := filepath.Join(c.Config(name).DataDir, tempest.StateFile)
		for _, k := range keys {
			plantRecord(t, path, reminders.RecordKind, reminders.RecordID(k).Key, []byte("\xffnot a shard record"))
		}
	}
	for _, name := range names {
		c.Start(name)
	}
	n1 := c.Node("n1")
	c.WaitSettled()
	count := func() map[string]int {
		out := map[string]int{}
		for _, line := range strings.Split(c.Logs(), "\n") {
			if !strings.Contains(line, `msg="loading the reminders of a shard" node=n1 `) {
				continue
			}
			for _, k := range keys {
				if strings.Contains(line, fmt.Sprintf("shard=%s ", k)) {
					out[k]++
				}
			}
		}
		return out
	}
	// The first failure of a shard may be logged before the passes below
	// or during them; during them, each shard is logged at most once.
	before := count()
	tempest.SyncReminderPasses(n1, 5)
	failed := 0
	for k, n := range count() {
		if d := n - before[k]; d > 1 {
			t.Errorf("shard %s logged %d times in 5 passes, want at most once", k, d)
		}
		if n > 0 {
			failed++
		}
	}
	if failed == 0 {
		t.Fatalf("no shard of n1 failed to load its reminders (owned: %v)", tab.Owned("n1"))
	}
}
