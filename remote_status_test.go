package tempest_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/tempesttest"
)

// TestRemoteStatusAndPassivateFromAnyNode: Node.Status gives the same
// answer on every node, and Node.Passivate from a node that does not own
// the actor passivates it on its owner (over the federation protocol on
// the control lane), keeping its state.
func TestRemoteStatusAndPassivateFromAnyNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := threeNodes(t)
	ctx := t.Context()
	n1 := c.Node("n1")
	ref, loc := counterOn(t, n1, "n1", true, "st")
	if v := add(t, ctx, n1, ref, 3); v != 3 {
		t.Fatalf("counter = %d after 3 adds", v)
	}
	want := tempest.Status{Kind: demo.Counter, Key: ref.Key(), State: actor.Valid, Node: loc.Owner, Incarnation: 1, Active: true}
	for _, n := range c.Nodes() {
		st, err := n.Status(ctx, ref)
		if err != nil || st != want {
			t.Errorf("Status on %s = %+v, %v; want %+v", n.Name(), st, err, want)
		}
	}
	var other *tempest.Node // neither the owner nor n1
	for _, n := range c.Nodes() {
		if n.Name() != loc.Owner && n != n1 {
			other = n
		}
	}
	before := c.Node(loc.Owner).FederationStats().Answered
	if err := other.Passivate(ctx, ref); err != nil {
		t.Fatalf("Passivate from %s: %v", other.Name(), err)
	}
	if after := c.Node(loc.Owner).FederationStats().Answered; after[0] <= before[0] {
		t.Errorf("the owner answered no request: OK answers %d -> %d", before[0], after[0])
	}
	want.State, want.Active = actor.Dormant, false
	for _, n := range c.Nodes() {
		st, err := n.Status(ctx, ref)
		if err != nil || st != want {
			t.Errorf("Status on %s after Passivate = %+v, %v; want %+v", n.Name(), st, err, want)
		}
	}
	if v := get(t, ctx, n1, ref); v != 3 {
		t.Fatalf("counter = %d after passivation, acknowledged 3", v)
	}
	// A request routed at an epoch newer than the owner's table is
	// refused NOT_SERVING (the owner is behind), counted; one at the
	// owner's epoch is answered.
	owner := c.Node(loc.Owner)
	notServing := owner.FederationStats().Answered[federation.CodeNotServing]
	var fe *federation.Error
	if err := tempest.StatusAt(ctx, n1, loc.Owner, ref, loc.Epoch+5); !errors.As(err, &fe) || fe.Code != federation.CodeNotServing ||
		!errors.Is(err, actor.ErrProcessUnavailable) {
		t.Errorf("status at a future epoch = %v, want NOT_SERVING", err)
	}
	if got := owner.FederationStats().Answered[federation.CodeNotServing]; got != notServing+1 {
		t.Errorf("NOT_SERVING answers %d -> %d", notServing, got)
	}
	if err := tempest.StatusAt(ctx, n1, loc.Owner, ref, loc.Epoch); err != nil {
		t.Errorf("status at the owner's epoch: %v", err)
	}
	// An unknown kind fails the same way everywhere.
	for _, n := range c.Nodes() {
		if _, err := n.Status(ctx, n.Ref("no-such-kind", "k")); !errors.Is(err, actor.ErrUnknownKind) {
			t.Errorf("Status of an unknown kind on %s = %v", n.Name(), err)
		}
	}
}

// TestHTTPStatusNeverLeavesNodeByGossipAddress: every node advertises,
// in gossip, the HTTP address of a rogue server. Status and passivation
// asked of a node that does not own the actor are answered through the
// owner's supervisor over the cluster's mutually authenticated links:
// the rogue server never sees a request (nor the bearer token), and
// nothing it would answer reaches the client.
func TestHTTPStatusNeverLeavesNodeByGossipAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	var hits atomic.Int64
	rogue := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"counter","key":"forged","state":"Valid","node":"rogue","incarnation":99,"active":true}`))
	}))
	defer rogue.Close()
	c := demoCluster(t, tempesttest.Options{Nodes: 3, Configure: func(_ string, cfg *tempest.Config) {
		cfg.Cluster.HTTPAddr = rogue.Listener.Addr().String()
	}})
	n1 := c.Node("n1")
	ref, loc := counterOn(t, n1, "n1", true, "http")
	add(t, t.Context(), n1, ref, 2)

	const token = "s3cret-token-0123"
	api, err := httpapi.New(httpapi.Config{Node: n1, Token: []byte(token)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	call := func(method, path string) httpapi.StatusBody {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body httpapi.StatusBody
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d, %v", method, path, resp.StatusCode, err)
		}
		return body
	}
	path := "/v1/actors/" + demo.Counter + "/" + ref.Key()
	got := call(http.MethodGet, path)
	if want := (httpapi.StatusBody{Kind: demo.Counter, Key: ref.Key(), State: "Valid", Node: loc.Owner, Incarnation: 1, Active: true}); got != want {
		t.Errorf("status = %+v, want %+v", got, want)
	}
	got = call(http.MethodPost, path+"/passivate")
	if want := (httpapi.StatusBody{Kind: demo.Counter, Key: ref.Key(), State: "Dormant", Node: loc.Owner, Incarnation: 1}); got != want {
		t.Errorf("after passivate = %+v, want %+v", got, want)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the rogue address advertised in gossip got %d requests", n)
	}
}
