package prospero

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
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

// Lazy writes start no group of their own: they wait for a write that
// cannot wait and share its commit, in queue order.
func TestGroupCommitLazyWritesJoinTheNextEagerGroup(t *testing.T) {
	var mu sync.Mutex
	var groups [][]string
	called := make(chan struct{}, 16)
	g := newGroupCommitter(func(group []asyncPut) {
		mu.Lock()
		var keys []string
		for i := range group {
			keys = append(keys, group[i].id.Key)
		}
		groups = append(groups, keys)
		mu.Unlock()
		called <- struct{}{}
	})
	defer g.close()
	g.mu.Lock()
	g.linger = time.Hour // only an eager write, or closing, commits them
	g.mu.Unlock()
	var wg sync.WaitGroup
	queue := func(key string, lazy bool) {
		wg.Add(1)
		g.queued(asyncPut{id: Identity{Kind: "k", Key: key}, lazy: lazy, done: func(_ uint64, err error) {
			if err != nil {
				t.Errorf("%s: %v", key, err)
			}
			wg.Done()
		}})
	}
	queue("lazy1", true)
	queue("lazy2", true)
	select {
	case <-called:
		t.Fatal("lazy writes alone started a commit")
	case <-time.After(50 * time.Millisecond): // the absence of a commit
	}
	queue("eager", false)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(groups) != 1 || strings.Join(groups[0], ",") != "lazy1,lazy2,eager" {
		t.Fatalf("groups = %v, want one: lazy1, lazy2, eager", groups)
	}
}

// Lazy writes with no eager one after them are committed once the oldest
// waited the linger.
func TestGroupCommitLazyWritesCommitAfterTheLinger(t *testing.T) {
	g := newGroupCommitter(func([]asyncPut) {})
	defer g.close()
	g.mu.Lock()
	g.linger = time.Millisecond
	g.mu.Unlock()
	done := make(chan struct{})
	start := time.Now()
	g.queued(asyncPut{id: Identity{Kind: "k", Key: "x"}, lazy: true, done: func(uint64, error) { close(done) }})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a lazy write alone was never committed")
	}
	if d := time.Since(start); d < time.Millisecond {
		t.Fatalf("committed after %v, before the linger", d)
	}
}

// A store's own CommitError for the actor is not wrapped in another: the
// caller's error names the actor once and still matches both.
func TestCommitErrorNamesTheActorOnce(t *testing.T) {
	id := Identity{Kind: "counter", Key: "k"}
	cause := errors.New("lease lapsed")
	err := commitError(id, &CommitError{ID: id, Err: cause})
	if n := strings.Count(err.Error(), "not committed"); n != 1 || !errors.Is(err, ErrNotCommitted) || !errors.Is(err, cause) {
		t.Fatalf("%v: names the failure %d times, want once, matching ErrNotCommitted and the cause", err, n)
	}
	other := Identity{Kind: "counter", Key: "other"}
	if err := commitError(other, &CommitError{ID: id, Err: cause}); !strings.Contains(err.Error(), other.String()) {
		t.Fatalf("%v: another actor's CommitError must be wrapped in this one's", err)
	}
}
