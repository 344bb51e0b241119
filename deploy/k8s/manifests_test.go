package k8s_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// manifests is every object of the kustomization, decoded strictly.
type manifests struct {
	kust       kustomization
	namespaces []*corev1.Namespace
	configMaps []*corev1.ConfigMap
	services   []*corev1.Service
	sets       []*appsv1.StatefulSet
	pdbs       []*policyv1.PodDisruptionBudget
}

// kustomization is the subset of kustomize's file format used here; it
// is decoded strictly too.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// splitDocs splits a multi-document YAML file.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// decodeObject decodes one document strictly into the API type of its
// kind.
func decodeObject(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		obj = &corev1.Namespace{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1/Service":
		obj = &corev1.Service{}
	case "apps/v1/StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "policy/v1/PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	default:
		return nil, fmt.Errorf("unexpected kind %s %s", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

func load(t *testing.T) *manifests {
	t.Helper()
	var m manifests
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &m.kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if m.kust.Kind != "Kustomization" || m.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" {
		t.Fatalf("kustomization.yaml: kind %q apiVersion %q", m.kust.Kind, m.kust.APIVersion)
	}
	for _, f := range m.kust.Resources {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("resource %s: %v", f, err)
		}
		for i, doc := range splitDocs(b) {
			obj, err := decodeObject(doc)
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			switch o := obj.(type) {
			case *corev1.Namespace:
				m.namespaces = append(m.namespaces, o)
			case *corev1.ConfigMap:
				m.configMaps = append(m.configMaps, o)
			case *corev1.Service:
				m.services = append(m.services, o)
			case *appsv1.StatefulSet:
				m.sets = append(m.sets, o)
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			}
		}
	}
	if len(m.sets) != 1 {
		t.Fatalf("want one StatefulSet, have %d", len(m.sets))
	}
	return &m
}

func (m *manifests) set() *appsv1.StatefulSet { return m.sets[0] }

func (m *manifests) container(t *testing.T) *corev1.Container {
	t.Helper()
	cs := m.set().Spec.Template.Spec.Containers
	for i := range cs {
		if cs[i].Name == "tempest" {
			return &cs[i]
		}
	}
	t.Fatal("no container named tempest")
	return nil
}

func (m *manifests) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %q", name)
	return nil
}

// agentArgs returns the container's `tempest agent` flags as name ->
// values, and the ConfigMap's TEMPEST_* settings as flag names too.
func (m *manifests) agentSettings(t *testing.T) (args map[string][]string, env map[string]string) {
	t.Helper()
	c := m.container(t)
	if len(c.Command) != 0 {
		t.Errorf("command %q overrides the image's entrypoint /tempest", c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Fatalf("args %q: want `agent` first", c.Args)
	}
	args = map[string][]string{}
	for _, a := range c.Args[1:] {
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("arg %q: want --flag=value", a)
			continue
		}
		args[name] = append(args[name], val)
	}
	env = map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			continue
		}
		var cm *corev1.ConfigMap
		for _, x := range m.configMaps {
			if x.Name == from.ConfigMapRef.Name {
				cm = x
			}
		}
		if cm == nil {
			t.Fatalf("envFrom names ConfigMap %q, which is not in the kustomization", from.ConfigMapRef.Name)
		}
		for k, v := range cm.Data {
			if !strings.HasPrefix(k, "TEMPEST_") {
				t.Errorf("ConfigMap %s: key %q is not a TEMPEST_<FLAG> setting", cm.Name, k)
				continue
			}
			env[strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "TEMPEST_")), "_", "-")] = v
		}
	}
	return args, env
}

// setting is the effective value of an agent flag: args win over the
// ConfigMap, which wins over the binary's default.
func setting(args map[string][]string, env map[string]string, defaults map[string]string, flag string) string {
	if v, ok := args[flag]; ok {
		return v[len(v)-1]
	}
	if v, ok := env[flag]; ok {
		return v
	}
	return defaults[flag]
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	m := load(t)
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(m.kust.Resources, f) {
			t.Errorf("%s is not listed in kustomization.yaml resources", f)
		}
	}
	if len(m.namespaces) != 1 || m.namespaces[0].Name != m.kust.Namespace {
		t.Errorf("kustomization namespace %q has no Namespace manifest", m.kust.Namespace)
	}
	for _, im := range m.kust.Images {
		if im.Name != m.container(t).Image {
			t.Errorf("kustomization image %q is not the container's image %q", im.Name, m.container(t).Image)
		}
	}
}

// A field the API does not know must fail: this is what makes the strict
// decoding a check at all.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	b, err := os.ReadFile("statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeObject(b); err != nil {
		t.Fatalf("statefulset.yaml: %v", err)
	}
	bad := bytes.Replace(b, []byte("podManagementPolicy:"), []byte("podManagmentPolicy:"), 1)
	if _, err := decodeObject(bad); err == nil {
		t.Fatal("a misspelt field decoded without error")
	}
	bad = bytes.Replace(b, []byte("terminationGracePeriodSeconds: 45"), []byte("terminationGracePeriodSeconds: soon"), 1)
	if _, err := decodeObject(bad); err == nil {
		t.Fatal("a string in an integer field decoded without error")
	}
}

func TestStatefulSet(t *testing.T) {
	m := load(t)
	s := m.set()
	sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	podLabels := labels.Set(s.Spec.Template.Labels)
	if sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("selector %s does not match the pod template labels %v", sel, podLabels)
	}
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel (bootstrap-expect needs every pod up)", s.Spec.PodManagementPolicy)
	}
	headless := m.service(t, s.Spec.ServiceName)
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("serviceName %s: clusterIP %q, want None (headless)", headless.Name, headless.Spec.ClusterIP)
	}
	if !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("headless service %s must publish not-ready addresses, or bootstrap deadlocks", headless.Name)
	}
	if s.Spec.Replicas == nil || *s.Spec.Replicas < 3 {
		t.Errorf("replicas %v, want at least 3 for a raft quorum", s.Spec.Replicas)
	}
	args, env := m.agentSettings(t)
	if be := setting(args, env, nil, "bootstrap-expect"); be != strconv.Itoa(int(*s.Spec.Replicas)) {
		t.Errorf("bootstrap-expect %q, want the replica count %d", be, *s.Spec.Replicas)
	}
	pod := s.Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
		pod.SecurityContext.FSGroup == nil {
		t.Error("the pod must run as non-root with an fsGroup (so the data volume is writable)")
	}
	c := m.container(t)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}

	// Node name from the pod name, joined through the headless service,
	// advertised with the pod's DNS name under the headless service.
	envs := map[string]*corev1.EnvVar{}
	for i := range c.Env {
		envs[c.Env[i].Name] = &c.Env[i]
	}
	fieldOf := func(name string) string {
		if e := envs[name]; e != nil && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
		return ""
	}
	if args["name"] == nil || args["name"][0] != "$(POD_NAME)" || fieldOf("POD_NAME") != "metadata.name" {
		t.Errorf("--name %q: want $(POD_NAME) from metadata.name", args["name"])
	}
	if a := args["advertise"]; a == nil || !strings.HasPrefix(a[0], "$(POD_NAME)."+headless.Name+".") {
		t.Errorf("--advertise %q: want the pod's DNS name $(POD_NAME).%s...", a, headless.Name)
	}
	join := strings.Join(args["join"], ",")
	if !strings.HasPrefix(join, headless.Name+".") {
		t.Errorf("--join %q: want the headless service %s's DNS name", join, headless.Name)
	}
	if strings.Contains(join, "$(POD_NAMESPACE)") && fieldOf("POD_NAMESPACE") != "metadata.namespace" {
		t.Errorf("--join uses $(POD_NAMESPACE), which is not from metadata.namespace")
	}
	for _, a := range c.Args {
		for _, ref := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(a, -1) {
			if envs[ref[1]] == nil {
				t.Errorf("arg %q refers to $(%s), which is not in env", a, ref[1])
			}
		}
	}

	// Data on the volume claim template, mounted at --data-dir.
	dataDir := setting(args, env, nil, "data-dir")
	var dataMount string
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == dataDir {
			dataMount = vm.Name
		}
	}
	if dataDir == "" || dataMount == "" {
		t.Fatalf("data-dir %q is not a volume mount", dataDir)
	}
	found := false
	for _, pvc := range s.Spec.VolumeClaimTemplates {
		if pvc.Name == dataMount {
			found = true
			if _, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
				t.Errorf("volume claim %s has no storage request", pvc.Name)
			}
		}
	}
	if !found {
		t.Errorf("data-dir mount %q is not a volumeClaimTemplate", dataMount)
	}
	for _, v := range pod.Volumes {
		if v.Name == dataMount {
			t.Errorf("data volume %q is a pod volume, not a claim template", dataMount)
		}
	}

	// The grace period covers the drain timeout.
	drain, err := time.ParseDuration(setting(args, env, map[string]string{"drain-timeout": "30s"}, "drain-timeout"))
	if err != nil {
		t.Fatalf("drain-timeout: %v", err)
	}
	g := pod.TerminationGracePeriodSeconds
	if g == nil || time.Duration(*g)*time.Second < drain+5*time.Second || time.Duration(*g)*time.Second > 3*drain {
		t.Errorf("terminationGracePeriodSeconds %v does not match the drain timeout %s (want drain + a margin)", g, drain)
	}
}

func TestDisruptionBudget(t *testing.T) {
	m := load(t)
	if len(m.pdbs) != 1 {
		t.Fatalf("want one PodDisruptionBudget, have %d", len(m.pdbs))
	}
	p := m.pdbs[0]
	if p.Spec.MaxUnavailable == nil || *p.Spec.MaxUnavailable != intstr.FromInt32(1) || p.Spec.MinAvailable != nil {
		t.Errorf("want maxUnavailable 1 only, have max %v min %v", p.Spec.MaxUnavailable, p.Spec.MinAvailable)
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Empty() || !sel.Matches(labels.Set(m.set().Spec.Template.Labels)) {
		t.Errorf("PDB selector %s does not select the pods", sel)
	}
}

// agentHelp is `tempest agent --help` of the real binary: its flags and
// their defaults.
type agentHelp struct {
	flags    map[string]bool
	defaults map[string]string
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// tempestBinary builds the tempest binary once (or takes TEMPEST_BIN).
func tempestBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("TEMPEST_BIN"); p != "" {
			binPath, binErr = filepath.Abs(p)
			return
		}
		dir, err := os.MkdirTemp("", "tempest-k8s-test-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "tempest")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/node")
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/node: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Getenv("TEMPEST_BIN") == "" && binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func readAgentHelp(t *testing.T) agentHelp {
	t.Helper()
	out, err := exec.Command(tempestBinary(t), "agent", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("tempest agent --help: %v\n%s", err, out)
	}
	h := agentHelp{flags: map[string]bool{}, defaults: map[string]string{}}
	re := regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: \w+)?\s+(.*)$`)
	def := regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`)
	for _, l := range strings.Split(string(out), "\n") {
		mm := re.FindStringSubmatch(l)
		if mm == nil {
			continue
		}
		h.flags[mm[1]] = true
		if d := def.FindStringSubmatch(mm[2]); d != nil {
			h.defaults[mm[1]] = d[1]
		}
	}
	for _, f := range []string{"data-dir", "gossip-addr", "quic-addr", "http-addr", "join"} {
		if !h.flags[f] {
			t.Fatalf("tempest agent --help does not list --%s; output:\n%s", f, out)
		}
	}
	return h
}

func TestFlagsExistInAgent(t *testing.T) {
	m := load(t)
	h := readAgentHelp(t)
	args, env := m.agentSettings(t)
	for name := range args {
		if !h.flags[name] {
			t.Errorf("args: --%s is not a flag of tempest agent", name)
		}
	}
	for name := range env {
		if !h.flags[name] {
			t.Errorf("ConfigMap: TEMPEST_%s is not a flag of tempest agent",
				strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
		}
	}
	if env["config"] != "" || args["config"] != nil {
		t.Error("configure the agent with flags and the ConfigMap, not --config")
	}
}

func portOf(t *testing.T, flag, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("--%s %q: %v", flag, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 {
		t.Fatalf("--%s %q: want a fixed port", flag, addr)
	}
	return int32(n)
}

func TestPortsDeclared(t *testing.T) {
	m := load(t)
	h := readAgentHelp(t)
	args, env := m.agentSettings(t)
	type want struct {
		flag  string
		proto corev1.Protocol
	}
	listens := []want{
		{"gossip-addr", corev1.ProtocolTCP}, {"gossip-addr", corev1.ProtocolUDP},
		{"quic-addr", corev1.ProtocolUDP}, {"http-addr", corev1.ProtocolTCP},
	}
	c := m.container(t)
	named := map[string]corev1.ContainerPort{}
	for _, p := range c.Ports {
		named[p.Name] = p
	}
	for _, w := range listens {
		addr := setting(args, env, h.defaults, w.flag)
		host, _, _ := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); host == "" || ip == nil || ip.IsLoopback() {
			if host != "0.0.0.0" && host != "::" && host != "" {
				t.Errorf("--%s %q: a pod must listen on all interfaces", w.flag, addr)
			}
		}
		port := portOf(t, w.flag, addr)
		ok := false
		for _, p := range c.Ports {
			if p.ContainerPort == port && p.Protocol == w.proto {
				ok = true
			}
		}
		if !ok {
			t.Errorf("--%s listens on %d/%s, which the container does not declare", w.flag, port, w.proto)
		}
	}
	// Every declared container port is one the agent listens on.
	for _, p := range c.Ports {
		ok := false
		for _, w := range listens {
			if portOf(t, w.flag, setting(args, env, h.defaults, w.flag)) == p.ContainerPort && p.Protocol == w.proto {
				ok = true
			}
		}
		if !ok {
			t.Errorf("container port %s %d/%s: the agent does not listen there", p.Name, p.ContainerPort, p.Protocol)
		}
	}
	// Services: each port targets a declared container port of the same
	// protocol; the headless service carries gossip (tcp+udp) and QUIC;
	// a client service carries HTTP.
	podLabels := labels.Set(m.set().Spec.Template.Labels)
	for _, s := range m.services {
		if s.Spec.Selector == nil || !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selects no tempest pod", s.Name)
		}
		for _, sp := range s.Spec.Ports {
			cp, ok := named[sp.TargetPort.StrVal]
			if sp.TargetPort.Type != intstr.String || !ok {
				t.Errorf("Service %s port %s: targetPort %v is not a named container port", s.Name, sp.Name, sp.TargetPort.String())
				continue
			}
			if cp.Protocol != sp.Protocol {
				t.Errorf("Service %s port %s: protocol %s, container port %s is %s", s.Name, sp.Name, sp.Protocol, cp.Name, cp.Protocol)
			}
		}
	}
	headless := m.service(t, m.set().Spec.ServiceName)
	for _, w := range listens[:3] {
		port := portOf(t, w.flag, setting(args, env, h.defaults, w.flag))
		ok := false
		for _, sp := range headless.Spec.Ports {
			if sp.Port == port && sp.Protocol == w.proto {
				ok = true
			}
		}
		if !ok {
			t.Errorf("headless service %s lacks %d/%s (--%s)", headless.Name, port, w.proto, w.flag)
		}
	}
	httpPort := portOf(t, "http-addr", setting(args, env, h.defaults, "http-addr"))
	client := false
	for _, s := range m.services {
		for _, sp := range s.Spec.Ports {
			if s.Spec.ClusterIP != corev1.ClusterIPNone && named[sp.TargetPort.StrVal].ContainerPort == httpPort {
				client = true
			}
		}
	}
	if !client {
		t.Error("no client Service for the HTTP API")
	}
}

// Probe endpoints of the agent (issue 7): /readyz is readiness,
// /healthz liveness.
func TestProbes(t *testing.T) {
	m := load(t)
	h := readAgentHelp(t)
	args, env := m.agentSettings(t)
	c := m.container(t)
	httpPort := portOf(t, "http-addr", setting(args, env, h.defaults, "http-addr"))
	check := func(what string, p *corev1.Probe, path string) {
		t.Helper()
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: want an httpGet of %s", what, path)
			return
		}
		if p.HTTPGet.Path != path {
			t.Errorf("%s probe: path %q, want %q", what, p.HTTPGet.Path, path)
		}
		port := p.HTTPGet.Port.IntVal
		if p.HTTPGet.Port.Type == intstr.String {
			port = 0
			for _, cp := range c.Ports {
				if cp.Name == p.HTTPGet.Port.StrVal && cp.Protocol == corev1.ProtocolTCP {
					port = cp.ContainerPort
				}
			}
		}
		if port != httpPort {
			t.Errorf("%s probe: port %s is not the HTTP API's %d", what, p.HTTPGet.Port.String(), httpPort)
		}
		if p.HTTPGet.Scheme == corev1.URISchemeHTTPS != (setting(args, env, nil, "http-tls") == "true") {
			t.Errorf("%s probe: scheme %q does not match --http-tls", what, p.HTTPGet.Scheme)
		}
	}
	check("readiness", c.ReadinessProbe, "/readyz")
	check("liveness", c.LivenessProbe, "/healthz")
	check("startup", c.StartupProbe, "/healthz")
	if s := c.StartupProbe; s != nil && time.Duration(s.PeriodSeconds*s.FailureThreshold)*time.Second < 2*time.Minute {
		t.Errorf("startup probe allows only %ds; give a node minutes to open its log", s.PeriodSeconds*s.FailureThreshold)
	}
	if l := c.LivenessProbe; l != nil && time.Duration(l.PeriodSeconds*l.FailureThreshold)*time.Second < 30*time.Second {
		t.Errorf("liveness probe kills after %ds; keep it lenient", l.PeriodSeconds*l.FailureThreshold)
	}
}

// The probes' paths answer on a real agent: a standalone node on
// loopback, with a token, as in the pod.
func TestProbeEndpointsAnswerOnARealAgent(t *testing.T) {
	m := load(t)
	c := m.container(t)
	bin := tempestBinary(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "agent", "--insecure-dev", "--name=probe",
		"--data-dir="+filepath.Join(dir, "data"), "--http-addr="+addr, "--http-token-file="+token,
		"--gossip-addr=127.0.0.1:0", "--quic-addr=127.0.0.1:0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("agent output:\n%s", out.String())
		}
	}()
	hc := &http.Client{Timeout: 2 * time.Second}
	get := func(path string) int {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	paths := []string{c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path, c.StartupProbe.HTTPGet.Path}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for _, p := range paths {
		for get(p) != http.StatusOK {
			select {
			case err := <-done:
				done <- err
				t.Fatalf("the agent exited (%v) before %s answered 200", err, p)
			case <-ctx.Done():
				t.Fatalf("%s did not answer 200 within the deadline", p)
			case <-tick.C:
			}
		}
	}
	// The API itself wants the token: an unauthenticated call is refused,
	// so the probes work only because these paths are exempt.
	if code := get("/v1/members"); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/members without the token: %d, want 401", code)
	}
}

// Every file the agent reads lives in a mounted volume that provides it.
func TestSecretFilesMounted(t *testing.T) {
	m := load(t)
	args, _ := m.agentSettings(t)
	c := m.container(t)
	pod := m.set().Spec.Template.Spec
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	replicas := int(*m.set().Spec.Replicas)
	for _, flag := range []string{"tls-ca", "tls-cert", "tls-key", "gossip-key-file", "http-token-file"} {
		if args[flag] == nil {
			t.Errorf("--%s is not set", flag)
			continue
		}
		for i := range replicas {
			path := strings.ReplaceAll(args[flag][0], "$(POD_NAME)", fmt.Sprintf("%s-%d", m.set().Name, i))
			if !fileProvided(c, vols, path) {
				t.Errorf("--%s %s (pod %d): no secret volume provides it", flag, path, i)
			}
		}
	}
	// The files come from Secrets, mounted read-only.
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if ok && (v.Secret != nil || v.Projected != nil) && !vm.ReadOnly {
			t.Errorf("secret volume %s is mounted read-write", vm.Name)
		}
	}
}

// fileProvided reports whether path is a key of a secret volume mounted
// in c.
func fileProvided(c *corev1.Container, vols map[string]corev1.Volume, path string) bool {
	for _, vm := range c.VolumeMounts {
		rel, err := filepath.Rel(vm.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		v, ok := vols[vm.Name]
		if !ok {
			continue
		}
		switch {
		case v.Secret != nil:
			if len(v.Secret.Items) == 0 && !strings.Contains(rel, "/") {
				return true // every key of the secret is a file
			}
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					return true
				}
			}
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.Secret == nil {
					continue
				}
				for _, it := range src.Secret.Items {
					if it.Path == rel {
						return true
					}
				}
			}
		}
	}
	return false
}

// The examples use CRDs (cert-manager, Prometheus Operator) whose Go
// types are not in k8s.io/api: they are checked as plain objects.
func TestExamples(t *testing.T) {
	m := load(t)
	pod := m.set().Spec.Template.Spec
	tlsSecrets := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					tlsSecrets[s.Secret.Name] = true
				}
			}
		}
	}

	b, err := os.ReadFile("examples/certificates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	issued := map[string]bool{}
	for i, doc := range splitDocs(b) {
		var obj struct {
			APIVersion string         `json:"apiVersion"`
			Kind       string         `json:"kind"`
			Metadata   map[string]any `json:"metadata"`
			Spec       struct {
				SecretName string   `json:"secretName"`
				DNSNames   []string `json:"dnsNames"`
				Usages     []string `json:"usages"`
				IsCA       bool     `json:"isCA"`
				IssuerRef  struct {
					Name string `json:"name"`
					Kind string `json:"kind"`
				} `json:"issuerRef"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("certificates.yaml document %d: %v", i, err)
		}
		if obj.APIVersion != "cert-manager.io/v1" {
			t.Errorf("certificates.yaml document %d: apiVersion %q", i, obj.APIVersion)
		}
		if obj.Kind != "Certificate" || obj.Spec.IsCA {
			continue
		}
		issued[obj.Spec.SecretName] = true
		if !tlsSecrets[obj.Spec.SecretName] {
			t.Errorf("Certificate %v writes %s, which no pod mounts", obj.Metadata["name"], obj.Spec.SecretName)
		}
		node := strings.TrimSuffix(obj.Spec.SecretName, "-tls")
		if len(obj.Spec.DNSNames) == 0 || obj.Spec.DNSNames[0] != node {
			t.Errorf("Certificate for %s: first DNS name %v, want the node name %s", obj.Spec.SecretName, obj.Spec.DNSNames, node)
		}
		if !slices.Contains(obj.Spec.Usages, "server auth") || !slices.Contains(obj.Spec.Usages, "client auth") {
			t.Errorf("Certificate for %s: usages %v need server auth and client auth (mutual TLS)", node, obj.Spec.Usages)
		}
	}
	for s := range tlsSecrets {
		if !issued[s] {
			t.Errorf("the pods mount %s, which no example Certificate issues", s)
		}
	}

	b, err = os.ReadFile("examples/servicemonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var sm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Selector  metav1.LabelSelector `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
				Path string `json:"path"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &sm); err != nil {
		t.Fatal(err)
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" {
		t.Fatalf("servicemonitor.yaml: %s %s", sm.APIVersion, sm.Kind)
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var svc *corev1.Service
	for _, s := range m.services {
		if sel.Matches(labels.Set(s.Labels)) {
			if svc != nil {
				t.Errorf("the ServiceMonitor selects both %s and %s (each pod would be scraped twice)", svc.Name, s.Name)
			}
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("the ServiceMonitor selects no Service")
	}
	for _, e := range sm.Spec.Endpoints {
		if e.Path != "/metrics" {
			t.Errorf("ServiceMonitor path %q, want /metrics", e.Path)
		}
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
			t.Errorf("ServiceMonitor port %q is not a port of Service %s", e.Port, svc.Name)
		}
	}
}
