package manifest_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/manifest/internal/form"
)

func caps() manifest.Capacities {
	return manifest.Capacities{
		Workers: 2, MailboxDepth: 1024, TurnBudget: 5 * time.Second,
		FairnessMessages: 64, FairnessTime: 200 * time.Microsecond,
		ReplacementWorkers: 64,
		Kinds: []manifest.KindCapacities{
			{Kind: "account", MailboxDepth: 256, TurnBudget: 50 * time.Millisecond},
			{Kind: "counter", MailboxDepth: 1024, TurnBudget: 5 * time.Second},
		},
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name     string
		fs       fstest.MapFS
		env      map[string]string
		want     string
		quota    float64
		contains bool
	}{
		{name: "bare host", fs: fstest.MapFS{
			"proc/1/cgroup":         {Data: []byte("0::/init.scope\n")},
			"sys/fs/cgroup/cpu.max": {Data: []byte("max 100000\n")},
		}, want: ""},
		{name: "docker marker with quota", fs: fstest.MapFS{
			".dockerenv":            {},
			"sys/fs/cgroup/cpu.max": {Data: []byte("150000 100000\n")},
		}, want: "docker", quota: 1.5},
		{name: "kubernetes env", fs: fstest.MapFS{},
			env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, want: "kubernetes"},
		{name: "podman", fs: fstest.MapFS{"run/.containerenv": {}}, want: "podman"},
		{name: "cgroup v1 docker with cfs quota", fs: fstest.MapFS{
			"proc/1/cgroup":                       {Data: []byte("12:cpu,cpuacct:/docker/abc\n")},
			"sys/fs/cgroup/cpu/cpu.cfs_quota_us":  {Data: []byte("50000\n")},
			"sys/fs/cgroup/cpu/cpu.cfs_period_us": {Data: []byte("100000\n")},
		}, want: "docker", quota: 0.5},
		{name: "cgroup v1 no quota", fs: fstest.MapFS{
			"proc/1/cgroup":                       {Data: []byte("3:cpu:/kubepods/pod1\n")},
			"sys/fs/cgroup/cpu/cpu.cfs_quota_us":  {Data: []byte("-1\n")},
			"sys/fs/cgroup/cpu/cpu.cfs_period_us": {Data: []byte("100000\n")},
		}, want: "kubernetes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			got := manifest.DetectFrom(tc.fs, getenv)
			if got.Runtime != tc.want || got.Container != (tc.want != "") || got.CPUQuota != tc.quota {
				t.Fatalf("got %+v, want runtime %q quota %g", got, tc.want, tc.quota)
			}
		})
	}
}

func TestBuildProfiles(t *testing.T) {
	hosted := manifest.Build(manifest.Options{Capacities: caps()})
	if hosted.Profile != manifest.Hosted || hosted.Authority != manifest.Sovereign {
		t.Fatalf("hosted: got %v/%v", hosted.Profile, hosted.Authority)
	}
	if got := hosted.Clause(manifest.Fairness); got != manifest.Assumed(manifest.SubstrateHosted) {
		t.Fatalf("hosted fairness = %v", got)
	}
	for _, c := range []manifest.ClauseID{manifest.TurnDiscipline, manifest.ControlPlaneImmunity, manifest.Admission} {
		if !hosted.Clause(c).IsDischarged() {
			t.Fatalf("hosted %v = %v, want Discharged", c, hosted.Clause(c))
		}
	}

	ctr := manifest.Build(manifest.Options{Env: manifest.Environment{Container: true, Runtime: "docker", CPUQuota: 1.5}, Capacities: caps()})
	if ctr.Profile != manifest.Container || ctr.Capacities.CPUQuota != 1.5 {
		t.Fatalf("container: got %v quota %g", ctr.Profile, ctr.Capacities.CPUQuota)
	}
	if ctr.Clause(manifest.Fairness).IsDischarged() {
		t.Fatal("container fairness should be assumed")
	}

	sim := manifest.Build(manifest.Options{Simulated: true, Env: manifest.Environment{Container: true}})
	if sim.Profile != manifest.Simulated || !sim.Clause(manifest.Fairness).IsDischarged() {
		t.Fatalf("simulated: got %v fairness %v", sim.Profile, sim.Clause(manifest.Fairness))
	}
}

func TestSatisfies(t *testing.T) {
	m := manifest.Build(manifest.Options{})
	if !m.Satisfies([]manifest.ClauseID{manifest.Admission, manifest.TurnDiscipline}) {
		t.Fatal("hosted should satisfy Admission+TurnDiscipline")
	}
	if m.Satisfies([]manifest.ClauseID{manifest.Fairness}) {
		t.Fatal("hosted must not satisfy a Fairness requirement")
	}
	if !m.Satisfies(nil) {
		t.Fatal("no requirement is always satisfied")
	}
	var empty manifest.Manifest
	if empty.Satisfies([]manifest.ClauseID{manifest.Admission}) {
		t.Fatal("a manifest without clauses satisfies nothing")
	}
}

func TestTextStable(t *testing.T) {
	m := manifest.Build(manifest.Options{Capacities: caps()})
	want := `profile: Hosted
authority: Sovereign
clauses:
  Fairness: Assumed(the OS scheduler and the Go runtime)
  TurnDiscipline: Discharged
  ControlPlaneImmunity: Discharged
  Admission: Discharged
capacities:
  workers: 2
  mailbox_depth: 1024
  turn_budget: 5s
  fairness_messages: 64
  fairness_time: 200µs
  hydration_budget: 0
  max_active: 0
  inbound_bytes: 0
  cpu_quota: 0
  replacement_workers: 64
  kinds:
    account: mailbox_depth=256 turn_budget=50ms
    counter: mailbox_depth=1024 turn_budget=5s
`
	for range 20 { // map iteration order must not leak into the text
		if got := m.String(); got != want {
			t.Fatalf("got\n%s\nwant\n%s", got, want)
		}
	}
}

func TestDigest(t *testing.T) {
	a := manifest.Build(manifest.Options{Capacities: caps()})
	b := manifest.Build(manifest.Options{Capacities: caps()})
	if a.Digest() != b.Digest() || len(a.Digest()) != 16 {
		t.Fatalf("digests %q %q", a.Digest(), b.Digest())
	}
	c := caps()
	c.MailboxDepth = 10
	if manifest.Build(manifest.Options{Capacities: c}).Digest() == a.Digest() {
		t.Fatal("digest must change with capacities")
	}
	c = caps()
	c.Kinds[0].TurnBudget = time.Second
	if manifest.Build(manifest.Options{Capacities: c}).Digest() == a.Digest() {
		t.Fatal("digest must change with a kind's turn budget")
	}
	if manifest.Build(manifest.Options{Simulated: true, Capacities: caps()}).Digest() == a.Digest() {
		t.Fatal("digest must change with profile")
	}
}

func TestJSONRoundTrip(t *testing.T) {
	m := manifest.Build(manifest.Options{Env: manifest.Environment{Container: true, CPUQuota: 2}, Capacities: caps()})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"digest":"`+m.Digest()+`"`) {
		t.Fatalf("json lacks digest: %s", b)
	}
	var back manifest.Manifest
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.String() != m.String() {
		t.Fatalf("round trip:\n%s\nvs\n%s", back, m)
	}
	for _, bad := range []string{
		`{"profile":"Mainframe"}`,
		`{"profile":"Hosted","authority":"Anarchic"}`,
		`{"profile":"Hosted","authority":"Sovereign","clauses":[{"clause":"Luck","discharge":"Discharged"}]}`,
		`{"profile":"Hosted","authority":"Sovereign","clauses":[{"clause":"Fairness","discharge":"Maybe"}]}`,
		`{"profile":"Hosted","authority":"Sovereign","clauses":[{"clause":"Fairness","discharge":"Assumed"}]}`,
		`{"profile":"Hosted","authority":"Sovereign","capacities":{"turn_budget":"soon"}}`,
		`{"profile":"Hosted","authority":"Sovereign","capacities":{"kinds":[{"kind":"a","turn_budget":"soon"}]}}`,
	} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestDetectRealMachine(t *testing.T) {
	// Whatever the machine is, detection must not fail and must agree
	// with itself.
	a, b := manifest.Detect(), manifest.Detect()
	if a != b {
		t.Fatalf("unstable detection: %+v vs %+v", a, b)
	}
}

func TestBARERoundTrip(t *testing.T) {
	for _, o := range []manifest.Options{
		{Capacities: caps()},
		{Simulated: true},
		{Env: manifest.Environment{Container: true, CPUQuota: 0.25}, Capacities: caps()},
	} {
		m := manifest.Build(o)
		b, err := m.MarshalBARE()
		if err != nil {
			t.Fatal(err)
		}
		var back manifest.Manifest
		if err := back.UnmarshalBARE(b); err != nil {
			t.Fatal(err)
		}
		if back.String() != m.String() || back.Digest() != m.Digest() {
			t.Fatalf("round trip:\n%s\nvs\n%s", back, m)
		}
		// Every strict prefix is rejected, and so are trailing bytes.
		for i := range b {
			if err := back.UnmarshalBARE(b[:i]); err == nil {
				t.Fatalf("accepted a %d-byte prefix of %d", i, len(b))
			}
		}
		if err := back.UnmarshalBARE(append(b, 0)); err == nil {
			t.Fatal("accepted trailing bytes")
		}
	}
}

func TestBARERejectsBadValues(t *testing.T) {
	good, err := manifest.Build(manifest.Options{}).MarshalBARE()
	if err != nil {
		t.Fatal(err)
	}
	var m manifest.Manifest
	bad := append([]byte{9}, good[1:]...) // profile 9 is not declared
	if err := m.UnmarshalBARE(bad); err == nil {
		t.Fatal("accepted an unknown profile")
	}
	w := form.Manifest{Profile: form.ProfileHosted, Clauses: []form.ClauseEntry{
		{Clause: form.ClauseIDFairness}, {Clause: form.ClauseIDFairness, Substrate: "x"},
	}}
	dup, err := w.MarshalBARE()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.UnmarshalBARE(dup); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatal("accepted a duplicate clause")
	}
}

func FuzzUnmarshalBARE(f *testing.F) {
	for _, o := range []manifest.Options{{}, {Simulated: true}, {Capacities: caps()}} {
		b, err := manifest.Build(o).MarshalBARE()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m manifest.Manifest
		if err := m.UnmarshalBARE(b); err != nil {
			return
		}
		// Whatever decodes must re-encode to bytes that decode equal.
		again, err := m.MarshalBARE()
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var m2 manifest.Manifest
		if err := m2.UnmarshalBARE(again); err != nil || m2.String() != m.String() {
			t.Fatalf("unstable round trip: %v", err)
		}
	})
}
