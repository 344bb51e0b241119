package cli

import (
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/wire"
)

// fakeAPI is a node's HTTP API as far as bench and actors use it: it
// lists members and answers asks and inventories, counting the requests
// that carried the token.
type fakeAPI struct {
	srv     *httptest.Server
	name    string
	members func() []httpapi.MemberBody
	tokened atomic.Int64 // requests that carried the bearer token
	asks    atomic.Int64
}

func newFakeAPI(t *testing.T, name string, cert *tls.Certificate) *fakeAPI {
	t.Helper()
	f := &fakeAPI{name: name, members: func() []httpapi.MemberBody { return nil }}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		f.note(r)
		_ = json.NewEncoder(w).Encode(httpapi.MembersBody{Node: name, Leader: name, Members: f.members()})
	})
	mux.HandleFunc("POST /v1/actors/{kind}/{key}/ask", func(w http.ResponseWriter, r *http.Request) {
		f.note(r)
		f.asks.Add(1)
		_, _ = w.Write([]byte(`{"text":"bench"}`))
	})
	mux.HandleFunc("GET /v1/actors", func(w http.ResponseWriter, r *http.Request) {
		f.note(r)
		_ = json.NewEncoder(w).Encode(httpapi.ActorsBody{Node: name, Kind: r.URL.Query().Get("kind"), Count: 1,
			Actors: []httpapi.ActorEntry{{Key: "from-" + name, State: "active"}}})
	})
	f.srv = httptest.NewUnstartedServer(mux)
	if cert != nil {
		f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		f.srv.StartTLS()
	} else {
		f.srv.Start()
	}
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) note(r *http.Request) {
	if r.Header.Get("Authorization") == "Bearer "+benchToken {
		f.tokened.Add(1)
	}
}

func (f *fakeAPI) host() string { return f.srv.Listener.Addr().String() }

const benchToken = "secret-token-of-the-cluster"

// Members advertise their HTTP address in gossip, which anyone holding
// the gossip key can forge. bench and actors send the token only to the
// addresses they were given and to members whose address is verified:
// proven with a cluster certificate and served over https under a
// certificate naming the member. A rogue gossip member, and over plain
// HTTP any address taken from gossip, gets nothing.
func TestClusterCommandsSendTheTokenOnlyToGivenOrVerifiedAddresses(t *testing.T) {
	leakCheck(t)
	t.Setenv("TEMPEST_TOKEN", benchToken)
	entry := newFakeAPI(t, "n1", nil)
	rogue := newFakeAPI(t, "rogue", nil)   // gossip key, no certificate
	forged := newFakeAPI(t, "forged", nil) // an address forged for the proven n2
	given := newFakeAPI(t, "n3", nil)
	entry.members = func() []httpapi.MemberBody {
		return []httpapi.MemberBody{
			{Name: "n1", Status: "alive", Proven: true, HTTP: entry.host()},
			{Name: "n2", Status: "alive", Proven: true, HTTP: forged.host()},
			{Name: "n3", Status: "alive", Proven: true, HTTP: given.host()},
			{Name: "rogue", Status: "alive", Proven: false, HTTP: rogue.host()},
		}
	}
	_, errOut, err := cli(t, "bench", "--addr", entry.srv.URL, "--target", given.srv.URL,
		"--duration", "300ms", "--concurrency", "4", "--keys", "10", "echo")
	if err != nil {
		t.Fatalf("bench: %v (%s)", err, errOut)
	}
	if entry.asks.Load() == 0 || given.asks.Load() == 0 {
		t.Errorf("asks: %d to --addr, %d to --target; want some to each", entry.asks.Load(), given.asks.Load())
	}
	out, errActors, err := cli(t, "actors", "echo", "--addr", entry.srv.URL, "--target", given.srv.URL)
	if err != nil {
		t.Fatalf("actors: %v (%s)", err, errActors)
	}
	if !strings.Contains(out, "from-n1") || !strings.Contains(out, "from-n3") {
		t.Errorf("actors lists neither given node: %q", out)
	}
	for _, f := range []*fakeAPI{rogue, forged} {
		if n := f.tokened.Load(); n > 0 {
			t.Errorf("%s got the token %d times", f.name, n)
		}
	}
	for _, e := range []string{errOut, errActors} {
		if !strings.Contains(e, "rogue") || !strings.Contains(e, "not proved its name") ||
			!strings.Contains(e, "n2") || !strings.Contains(e, "plain HTTP") {
			t.Errorf("the note does not name the members left out and why: %q", e)
		}
	}
}

// Over https a proven member is verified by its certificate: one that
// names it is used, and an address whose certificate names another node
// fails the handshake before any request (and token) is sent.
func TestClusterCommandsVerifyMembersByCertificateOverHTTPS(t *testing.T) {
	t.Setenv("TEMPEST_TOKEN", benchToken)
	ca, err := wire.NewCA("test CA", time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string) *tls.Certificate {
		c, k, err := ca.Issue(wire.NodeCertRequest{Name: name, IPs: []net.IP{net.ParseIP("127.0.0.1")},
			NotBefore: time.Now().Add(-time.Minute), Validity: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return &cert
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	entry := newFakeAPI(t, "n1", issue("n1"))
	n2 := newFakeAPI(t, "n2", issue("n2"))
	impostor := newFakeAPI(t, "n3", issue("n1")) // advertised as n3, holds n1's certificate
	entry.members = func() []httpapi.MemberBody {
		return []httpapi.MemberBody{
			{Name: "n1", Status: "alive", Proven: true, HTTP: entry.host()},
			{Name: "n2", Status: "alive", Proven: true, HTTP: n2.host()},
			{Name: "n3", Status: "alive", Proven: true, HTTP: impostor.host()},
		}
	}
	out, errOut, err := cli(t, "actors", "echo", "--addr", entry.srv.URL, "--tls-ca", caFile)
	if exitCode(err) != exitUnreachable {
		t.Fatalf("actors with an impostor among the members: %v, want unreachable (out %q, stderr %q)", err, out, errOut)
	}
	if !strings.Contains(out, "from-n2") {
		t.Errorf("the verified member n2 was not listed: %q", out)
	}
	if impostor.tokened.Load() > 0 {
		t.Error("the impostor got the token")
	}
	if n2.tokened.Load() == 0 {
		t.Error("the verified member got no request")
	}
}

// tempest members shows a gossip member that never proved its name as
// unproven, not as a plain alive member.
func TestMembersShowsUnprovenMembers(t *testing.T) {
	leakCheck(t)
	entry := newFakeAPI(t, "n1", nil)
	entry.members = func() []httpapi.MemberBody {
		return []httpapi.MemberBody{
			{Name: "n1", Status: "alive", Proven: true, Raft: "leader", DataID: "a1", RecordedDataID: "a1"},
			{Name: "n2", Status: "alive", Proven: true, Raft: "none", DataID: "b2", RecordedDataID: "b1"},
			{Name: "rogue", Status: "alive", Proven: false, Raft: "none"},
		}
	}
	out, _, err := cli(t, "members", "--addr", entry.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for l := range strings.Lines(out) {
		f := strings.Fields(l)
		lines[f[0]] = l
	}
	if !strings.Contains(lines["rogue"], "alive (unproven)") {
		t.Errorf("rogue: %q, want it shown alive (unproven)", lines["rogue"])
	}
	if strings.Contains(lines["n1"], "unproven") || strings.Contains(lines["n1"], "new data directory") {
		t.Errorf("n1: %q", lines["n1"])
	}
	if !strings.Contains(lines["n2"], "alive (new data directory)") {
		t.Errorf("n2, gossiping another data ID than recorded: %q, want it shown alive (new data directory)", lines["n2"])
	}
}
