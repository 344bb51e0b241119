package tempesttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/examples/bank"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/tempesttest"
)

func TestReadinessOfAStandaloneNode(t *testing.T) {
	n, err := tempest.New(tempest.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Readiness(); !errors.Is(err, tempest.ErrNotStarted) || n.Ready() {
		t.Fatalf("before Start: %v", err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(t.Context()); err != nil || !n.Ready() {
		t.Fatalf("after Start: %v", err)
	}
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(t.Context()); !errors.Is(err, tempest.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestRestartAndQuorumLoss restarts a node on its data directory, then
// kills two of three nodes: the survivor reports ErrNoQuorum in Readiness,
// in WaitReady and to callers.
func TestRestartAndQuorumLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: bank.Register})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	ref := actor.Virtual(bank.Account, "alice")
	owner := c.Owner(ref).Name()
	if _, err := bank.DepositTo(ctx, c.NotOwner(ref), "alice", 5); err != nil {
		t.Fatal(err)
	}
	c.Restart(owner)
	c.WaitSettled()
	if got := len(c.Nodes()); got != 3 {
		t.Fatalf("%d nodes after restart", got)
	}

	survivor := c.Nodes()[0]
	for _, n := range c.Nodes()[1:] {
		c.Kill(n.Name())
	}
	short, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	for !errors.Is(survivor.Readiness(), tempest.ErrNoQuorum) {
		if short.Err() != nil {
			t.Fatalf("survivor never reported no quorum: %v", survivor.Readiness())
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer wcancel()
	if err := survivor.WaitReady(wctx); !errors.Is(err, tempest.ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady without quorum: %v", err)
	}
	// Once the survivor knows the others dead (before, a tell to them is
	// still accepted for delivery)...
	for dead := 0; dead < 2; {
		dead = 0
		for _, m := range survivor.Members() {
			if m.Name != survivor.Name() && m.Status.Gone() {
				dead++
			}
		}
		if short.Err() != nil {
			t.Fatalf("survivor never saw the others dead: %v", survivor.Members())
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	// ...a caller learns why, whichever node owns the key: the survivor
	// cannot confirm its own ownership, nor replace the dead owners.
	keys := map[string]string{} // owner by the survivor's table -> a key it owns
	for i := 0; len(keys) < 3 && i < 1000; i++ {
		key := fmt.Sprintf("k%d", i)
		if owner, _, err := survivor.Locate(actor.Virtual(bank.Account, key)); err == nil && keys[owner] == "" {
			keys[owner] = key
		}
	}
	if len(keys) != 3 {
		t.Fatalf("keys by owner: %v", keys)
	}
	api, err := httpapi.New(httpapi.Config{Node: survivor})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	post := func(path, body string) (int, httpapi.ErrorBody) {
		resp, err := srv.Client().Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var eb httpapi.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		return resp.StatusCode, eb
	}
	for owner, key := range keys {
		ref := actor.Virtual(bank.Account, key)
		errs := map[string]error{}
		for op, do := range map[string]func(context.Context) error{
			"ask": func(ctx context.Context) error {
				_, err := bank.BalanceOf(ctx, survivor, key)
				return err
			},
			"tell":      func(ctx context.Context) error { return survivor.TellContext(ctx, ref, bank.GetBalance{}) },
			"passivate": func(ctx context.Context) error { return survivor.Passivate(ctx, ref) },
		} {
			actx, acancel := context.WithTimeout(ctx, time.Second)
			errs[op] = do(actx)
			acancel()
		}
		if owner == survivor.Name() {
			// Passivate acts on what the survivor holds in memory while it
			// cannot serve the shard (nothing here): not an error.
			if err := errs["passivate"]; err != nil {
				t.Errorf("passivate of a key the survivor owns, without quorum: %v", err)
			}
			delete(errs, "passivate")
		}
		if errs["tell"] == nil {
			// Accepted by the link to the dead owner, which has not failed
			// yet: what only the owner can know is not returned by Tell.
			delete(errs, "tell")
		}
		for op, err := range errs {
			if !errors.Is(err, tempest.ErrNoQuorum) || !errors.Is(err, actor.ErrProcessUnavailable) && !errors.Is(err, actor.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s of a key %s owns, without quorum: %v", op, owner, err)
			}
		}
		if code, eb := post("/v1/actors/"+bank.Account+"/"+key+"/ask?timeout=1s", `{"GetBalance":null}`); code != http.StatusServiceUnavailable || eb.Code != "no_quorum" {
			t.Errorf("HTTP ask of a key %s owns, without quorum: %d %+v", owner, code, eb)
		}
	}
	resp, err := srv.Client().Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var eb httpapi.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if want := "node not ready: " + tempest.ErrNoQuorum.Error(); resp.StatusCode != http.StatusServiceUnavailable || eb.Error != want {
		t.Errorf("/readyz without quorum: %d %+v, want the error %q", resp.StatusCode, eb, want)
	}
}

// TestPauseAndResume pauses the owner of a key: asks through another node
// stop being answered, the others declare it dead and re-place its
// shards, and the key is answered again by a new owner. Resumed, the old
// owner rejoins, and every node answers for the key, agreeing on one
// owner.
func TestPauseAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: bank.Register})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	ref := actor.Virtual(bank.Account, "alice")
	owner := c.Owner(ref)
	other := c.NotOwner(ref)
	if _, err := bank.DepositTo(ctx, other, "alice", 5); err != nil {
		t.Fatal(err)
	}

	c.Pause(owner.Name())
	actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := bank.BalanceOf(actx, other, "alice")
	acancel()
	if !errors.Is(err, actor.ErrDeadlineExceeded) && !errors.Is(err, actor.ErrProcessUnavailable) {
		t.Fatalf("ask of a paused owner's key: %v, want a deadline or unavailable", err)
	}
	for {
		now, _, _ := other.Locate(ref)
		dead := false
		for _, m := range other.Members() {
			if m.Name == owner.Name() && m.Status.Gone() {
				dead = true
			}
		}
		if dead && now != owner.Name() {
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := bank.BalanceOf(actx, other, "alice")
			acancel()
			if err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the paused owner %s was never replaced: %s places alice on %q", owner.Name(), other.Name(), now)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition
	}

	c.Resume(owner.Name())
	c.WaitSettled()
	owners := map[string]bool{}
	for _, n := range c.Nodes() {
		if _, err := bank.BalanceOf(ctx, n, "alice"); err != nil {
			t.Errorf("through %s after the resume: %v", n.Name(), err)
		}
		o, _, _ := n.Locate(ref)
		owners[o] = true
	}
	if len(owners) != 1 {
		t.Errorf("the nodes disagree on alice's owner: %v", owners)
	}
}
