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
	c.Kill("n1")
	path := filepath.Join(c.Config("n1").DataDir, tempest.StateFile)
	for _, k := range keys {
		plantRecord(t, path, reminders.RecordKind, reminders.RecordID(k).Key, []byte("\xffnot a shard record"))
	}
	n1 := c.Start("n1")
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
	before := count()
	tempest.SyncReminderPasses(n1, 5)
	after := count()
	failed := 0
	for k, n := range after {
		if d := n - before[k]; d > 1 {
			t.Errorf("shard %s logged %d times in 5 passes, want once", k, d)
		} else if d == 1 {
			failed++
		}
	}
	if failed == 0 {
		t.Fatalf("no shard of n1 failed to load its reminders (owned: %v)", tab.Owned("n1"))
	}
}
