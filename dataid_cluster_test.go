package tempest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/tempesttest"
)

// A node killed, its data directory emptied, and started again under its
// old name is not taken for the voter it was: the leader removes it from
// raft and adds it back as a new server under its new data ID, it
// catches up, and every acknowledged update is still there.
func TestEmptiedDataDirRejoinsAsANewServer(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	nodes := c.Nodes()
	leader := nodes[0].Leader()
	var victim string
	for _, n := range nodes {
		if n.Name() != leader {
			victim = n.Name()
			break
		}
	}
	via := c.Node(leader)
	recorded := func(n *tempest.Node, name string) string { return n.Table().DataIDs[name] }
	waitFor(t, 30*time.Second, "data IDs recorded", func() bool {
		for _, n := range c.Nodes() {
			for _, m := range c.Nodes() {
				if recorded(n, m.Name()) == "" {
					return false
				}
			}
		}
		return true
	})
	// Gossip carries each node's data ID and that it holds raft state
	// (so that no newcomer bootstraps a second cluster beside it).
	waitFor(t, 30*time.Second, "every node gossiping its data ID and raft membership", func() bool {
		for _, m := range via.Members() {
			if !m.Meta.InCluster || m.Meta.DataID != recorded(via, m.Name) {
				return false
			}
		}
		return true
	})
	old := recorded(via, victim)
	want := map[string]int64{}
	for i := range 8 {
		key := fmt.Sprintf("k%d", i)
		for range 3 {
			if _, err := via.Ask(ctxT(t), via.Ref(demo.Counter, key), demo.Add{N: 1}); err != nil {
				t.Fatalf("add to %s: %v", key, err)
			}
			want[key]++
		}
	}

	dir := c.Config(victim).DataDir
	c.Kill(victim)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	c.Start(victim)
	waitFor(t, 60*time.Second, "the emptied node added back as a new server", func() bool {
		info := c.Node(leader).RaftInfo()
		id := recorded(c.Node(leader), victim)
		return id != "" && id != old && info.Role(victim) == tempest.RoleVoter && recorded(c.Node(victim), victim) == id
	})
	c.WaitSettled()
	// /v1/members shows each member's data ID, gossiped and recorded.
	api, err := httpapi.New(httpapi.Config{Node: via})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	api.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/members", http.NoBody))
	var mb httpapi.MembersBody
	if err := json.Unmarshal(rec.Body.Bytes(), &mb); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("/v1/members: %d, %v: %s", rec.Code, err, rec.Body)
	}
	for _, m := range mb.Members {
		if m.DataID == "" || m.DataID != m.RecordedDataID || m.DataID != recorded(via, m.Name) {
			t.Errorf("/v1/members: %s gossips data ID %q, recorded %q; the table says %q", m.Name, m.DataID, m.RecordedDataID, recorded(via, m.Name))
		}
	}
	for key, n := range want {
		v, err := c.Node(victim).Ask(ctxT(t), via.Ref(demo.Counter, key), demo.Get{})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		if v.(demo.CounterValue).N != n {
			t.Errorf("%s = %v after the emptied node came back, want %d", key, v, n)
		}
	}
	checkSingleActivation(t, c)
}
