package prospero

import (
	"sync"
	"testing"
)

// Writes queued while a group is being committed are committed together
// in the next group, in queue order, and each done is called once.
func TestGroupCommitGathersWritesQueuedDuringACommit(t *testing.T) {
	entered, proceed := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var groups [][]string
	g := newGroupCommitter(func(group []asyncPut) {
		mu.Lock()
		first := len(groups) == 0
		var keys []string
		for i := range group {
			keys = append(keys, group[i].id.Key)
			group[i].version = uint64(len(groups)*100 + i + 1)
		}
		groups = append(groups, keys)
		mu.Unlock()
		if first {
			close(entered)
			<-proceed
		}
	})
	defer g.close()
	var wg sync.WaitGroup
	versions := make([]uint64, 11)
	put := func(i int, key string) {
		wg.Add(1)
		g.put(Identity{Kind: "k", Key: key}, 0, Record{}, func(v uint64, err error) {
			if err != nil {
				t.Errorf("put %s: %v", key, err)
			}
			versions[i] = v
			wg.Done()
		})
	}
	put(0, "first")
	<-entered
	for i := 1; i <= 10; i++ {
		put(i, string(rune('a'+i-1)))
	}
	close(proceed)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(groups) != 2 || len(groups[1]) != 10 || groups[1][0] != "a" || groups[1][9] != "j" {
		t.Fatalf("groups = %v, want [first] then the 10 writes queued meanwhile, in order", groups)
	}
	for i := 1; i <= 10; i++ {
		if versions[i] != uint64(100+i) {
			t.Fatalf("done of write %d got version %d, want %d", i, versions[i], 100+i)
		}
	}
}
