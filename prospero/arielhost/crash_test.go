package arielhost_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

const crashChildEnv = "TEMPEST_TEST_CRASH_CHILD_STORE"

// Nothing acknowledged is lost to kill -9: a child process adds to
// durable counters on a BoltStore and prints every acknowledged value; the
// test kills it with SIGKILL mid-stream and reopens the file, which must
// hold at least every value the child was answered.
func TestAcknowledgedStateSurvivesKill(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(t, path)
		return
	}
	path := filepath.Join(t.TempDir(), "state.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcknowledgedStateSurvivesKill$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{}
	sc := bufio.NewScanner(out)
	for n := 0; n < 400 && sc.Scan(); n++ {
		key, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("child printed %q", sc.Text())
		}
		acked[key] = max(acked[key], x)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(acked) == 0 {
		t.Fatal("the child acknowledged nothing")
	}
	store, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for key, want := range acked {
		rec, err := store.Get(context.Background(), prospero.Identity{Kind: "counter", Key: key})
		if err != nil {
			t.Fatalf("counter/%s: %v (acknowledged %d)", key, err, want)
		}
		if got, _ := decodeCount(rec.State); got < want {
			t.Fatalf("counter/%s at rest %d after kill -9, but %d was acknowledged", key, got, want)
		}
	}
}

// crashChild adds to 8 durable counters until it is killed.
func crashChild(t *testing.T, path string) {
	store, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, options{store: store, kind: durable})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := actor.Virtual("counter", fmt.Sprint(i))
			for {
				v, err := n.sched.Ask(context.Background(), ref, "add")
				if err != nil {
					t.Errorf("add: %v", err)
					return
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "%d %d\n", i, v)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
