package demo_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
)

const crashChildEnv = "TEMPEST_TEST_DEMO_CRASH_DIR"

// The demo counter is durable by default: a node killed with SIGKILL
// while it answers Adds comes back, on the same data directory, with at
// least every value it acknowledged.
func TestCounterSurvivesKillByDefault(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(t, dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCounterSurvivesKillByDefault$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int64{}
	sc := bufio.NewScanner(out)
	for n := 0; n < 300 && sc.Scan(); n++ {
		key, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		x, err := strconv.ParseInt(v, 10, 64)
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
	n := startNode(t, dir)
	for key, want := range acked {
		got, err := n.Ask(t.Context(), n.Ref(demo.Counter, key), demo.Get{})
		if err != nil {
			t.Fatal(err)
		}
		if v := got.(demo.CounterValue).N; v < want {
			t.Fatalf("counter/%s = %d after kill -9, but %d was acknowledged", key, v, want)
		}
	}
}

func startNode(t *testing.T, dir string) *tempest.Node {
	t.Helper()
	n, err := tempest.New(tempest.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	return n
}

// crashChild adds to 4 counters until it is killed, printing each
// acknowledged value.
func crashChild(t *testing.T, dir string) {
	n := startNode(t, dir)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := n.Ref(demo.Counter, fmt.Sprint(i))
			for {
				v, err := n.Ask(context.Background(), ref, demo.Add{N: 1})
				if err != nil {
					t.Errorf("add: %v", err)
					return
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "%d %d\n", i, v.(demo.CounterValue).N)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
