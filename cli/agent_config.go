package cli

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/membership"
)

// agentConfig is the configuration of `tempest agent`, from flags,
// TEMPEST_<FLAG> environment variables and the --config YAML file.
type agentConfig struct {
	// tracer is the OpenTelemetry provider built from OTEL_* (nil: off);
	// not a flag.
	tracer *sdktrace.TracerProvider
	// register is Options.Register (nil: the demo kinds only); not a
	// flag.
	register func(n *tempest.Node) error

	Config          string
	Name            string
	DataDir         string
	GossipAddr      string
	QUICAddr        string
	HTTPAddr        string
	Advertise       string
	Join            []string
	BootstrapExpect int
	GossipKeyFile   string
	TLSCA           string
	TLSCert         string
	TLSKey          string
	HTTPTokenFile   string
	HTTPTLS         bool
	MetricsPublic   bool
	HTTPMaxConns    int
	HTTPMaxPerIP    int
	LogLevel        string
	LogFormat       string
	InsecureDev     bool
	DrainTimeout    time.Duration
	Timing          string
	Shards          int
	Replicas        int
	ReplicaFsync    bool
	MinInSync       int
	IdleTimeout     time.Duration
	Persistence     string
	Workers         int
}

// defaultAgentConfig returns the defaults; Name is the host name.
func defaultAgentConfig() agentConfig {
	host, _ := os.Hostname()
	return agentConfig{
		Name:            sanitizeName(host),
		GossipAddr:      "0.0.0.0:7946",
		QUICAddr:        "0.0.0.0:7947",
		HTTPAddr:        "127.0.0.1:7948",
		BootstrapExpect: 1,
		LogLevel:        "info",
		LogFormat:       "text",
		DrainTimeout:    30 * time.Second,
		Timing:          "lan",
		Shards:          1024,
		Replicas:        3,
		MinInSync:       1,
		Persistence:     "every-turn",
	}
}

// sanitizeName turns a host name into a valid node name.
func sanitizeName(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '-'
	}, s)
	if s == "" {
		return "node"
	}
	return s
}

// bindAgentFlags declares the agent's flags on fs, writing into c.
func bindAgentFlags(fs *pflag.FlagSet, c *agentConfig) {
	d := defaultAgentConfig()
	*c = d
	fs.StringVar(&c.Config, "config", "", "YAML file of flag values (keys are flag names)")
	fs.StringVar(&c.Name, "name", d.Name, "unique, stable node name (default: the host name)")
	fs.StringVar(&c.DataDir, "data-dir", "", "directory for the state store and raft log (required)")
	fs.StringVar(&c.GossipAddr, "gossip-addr", d.GossipAddr, "gossip bind address, TCP and UDP")
	fs.StringVar(&c.QUICAddr, "quic-addr", d.QUICAddr, "QUIC bind address (UDP): actor mail, raft, handoff")
	fs.StringVar(&c.HTTPAddr, "http-addr", d.HTTPAddr, "HTTP API bind address (loopback by default)")
	fs.StringVar(&c.Advertise, "advertise", "", "IP address or DNS name other nodes use to reach this one (a name is resolved for gossip and dialled by name for QUIC; default: the bind address, or the first private IP)")
	fs.StringSliceVar(&c.Join, "join", nil, "addresses or DNS names of nodes to join (repeatable or comma-separated)")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", d.BootstrapExpect, "nodes that must see each other before the first raft bootstrap (0: only join an existing cluster)")
	fs.StringVar(&c.GossipKeyFile, "gossip-key-file", "", "file of base64 gossip keys (see tempest keygen); default $"+membership.KeyEnv)
	fs.StringVar(&c.TLSCA, "tls-ca", "", "cluster CA certificate (PEM)")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "this node's certificate (PEM, first DNS name = --name)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "this node's private key (PEM)")
	fs.StringVar(&c.HTTPTokenFile, "http-token-file", "", "file holding the bearer token the HTTP API requires (required on a non-loopback --http-addr)")
	fs.BoolVar(&c.HTTPTLS, "http-tls", false, "serve the HTTP API over TLS with the node's certificate")
	fs.BoolVar(&c.MetricsPublic, "metrics-public", false, "serve /metrics without the bearer token")
	fs.IntVar(&c.HTTPMaxConns, "http-max-conns", 0, "open connections the HTTP API accepts in all (0: 4096); idle ones make room for new ones")
	fs.IntVar(&c.HTTPMaxPerIP, "http-max-conns-per-client", 0, "open connections the HTTP API accepts from one client IP address (0: 256)")
	fs.StringVar(&c.LogLevel, "log-level", d.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", d.LogFormat, "text or json")
	fs.BoolVar(&c.InsecureDev, "insecure-dev", false, "allow running without TLS material (standalone node) or an HTTP token: for development only")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", d.DrainTimeout, "bound on the graceful shutdown (handoff, leave) after SIGTERM/SIGINT")
	fs.StringVar(&c.Timing, "timing", d.Timing, "failure-detection timing: lan, or fast (loopback tests and the dev cluster)")
	fs.IntVar(&c.Shards, "shards", d.Shards, "shards per placement group, used only when this node initialises a new cluster")
	fs.IntVar(&c.Replicas, "replicas", d.Replicas, "replicas of each shard's state at rest, owner included, used only when this node initialises a new cluster")
	fs.BoolVar(&c.ReplicaFsync, "replica-fsync", d.ReplicaFsync, "release a durable turn's outputs only once every replica fsync'd its state (default: once every replica received it)")
	fs.IntVar(&c.MinInSync, "min-in-sync", d.MinInSync, "fewest in-sync replicas, owner included, that must hold a durable turn's state before it is answered; with 2 a shard whose set shrank to its owner refuses durable writes (503) instead of acknowledging them from one disk")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", 0, "passivate idle demo actors after this long (0: the supervisor's default)")
	fs.StringVar(&c.Persistence, "persistence", d.Persistence, "when the demo counter writes its state at rest: every-turn (an Add is answered once it is on disk), passivation, or none")
	fs.IntVar(&c.Workers, "workers", 0, "scheduler workers (0: GOMAXPROCS)")
}

// validate checks c and returns the first problem as one line naming
// its flag.
func (c *agentConfig) validate() error {
	if c.DataDir == "" {
		return configError("data-dir", "required")
	}
	if c.Name == "" {
		return configError("name", "required")
	}
	if (tempest.Config{Name: c.Name, DataDir: "x"}).Validate() != nil {
		return configError("name", "%q: use letters, digits, '.', '-' and '_' only (at most 128)", c.Name)
	}
	for _, a := range []struct{ flag, v string }{{"gossip-addr", c.GossipAddr}, {"quic-addr", c.QUICAddr}, {"http-addr", c.HTTPAddr}} {
		if _, err := parseHostPort(a.v); err != nil {
			return configError(a.flag, "%q: %v", a.v, err)
		}
	}
	if c.Advertise != "" {
		if _, err := netip.ParseAddr(c.Advertise); err != nil && !validHostName(c.Advertise) {
			return configError("advertise", "%q: not an IP address or a DNS name", c.Advertise)
		}
	}
	for _, j := range c.Join {
		if err := membership.CheckSeed(j); err != nil {
			return configError("join", "%q: not a host or host:port (%v)", j, err)
		}
	}
	if c.BootstrapExpect < 0 {
		return configError("bootstrap-expect", "must not be negative")
	}
	if c.HTTPMaxConns < 0 {
		return configError("http-max-conns", "must not be negative")
	}
	if c.HTTPMaxPerIP < 0 {
		return configError("http-max-conns-per-client", "must not be negative")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return configError("log-level", "%q: want debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return configError("log-format", "%q: want text or json", c.LogFormat)
	}
	if c.DrainTimeout <= 0 {
		return configError("drain-timeout", "must be positive")
	}
	if c.Timing != "lan" && c.Timing != "fast" {
		return configError("timing", "%q: want lan or fast", c.Timing)
	}
	if c.Shards < 1 || c.Shards > 1<<16 {
		return configError("shards", "%d: want 1 to 65536", c.Shards)
	}
	if c.Replicas < 1 || c.Replicas > 7 {
		return configError("replicas", "%d: want 1 to 7", c.Replicas)
	}
	if c.MinInSync < 1 || c.MinInSync > c.Replicas {
		return configError("min-in-sync", "%d: want 1 to --replicas (%d)", c.MinInSync, c.Replicas)
	}
	if c.IdleTimeout < 0 {
		return configError("idle-timeout", "must not be negative")
	}
	if _, err := demo.ParsePersistence(c.Persistence); err != nil {
		return configError("persistence", "%q: want every-turn, passivation or none", c.Persistence)
	}
	if c.Workers < 0 || c.Workers > ariel.MaxWorkers {
		return configError("workers", "%d: want 0 (one per CPU) to %d", c.Workers, ariel.MaxWorkers)
	}
	tlsSet := 0
	for _, s := range []string{c.TLSCA, c.TLSCert, c.TLSKey} {
		if s != "" {
			tlsSet++
		}
	}
	switch {
	case tlsSet == 0 && !c.InsecureDev:
		return configError("tls-cert", "TLS material is required (--tls-ca, --tls-cert, --tls-key); --insecure-dev runs a standalone node without it")
	case tlsSet == 0 && len(c.Join) > 0:
		return configError("tls-cert", "joining a cluster needs TLS material (--tls-ca, --tls-cert, --tls-key)")
	case tlsSet > 0 && c.TLSCA == "":
		return configError("tls-ca", "required with --tls-cert and --tls-key")
	case tlsSet > 0 && c.TLSCert == "":
		return configError("tls-cert", "required with --tls-ca and --tls-key")
	case tlsSet > 0 && c.TLSKey == "":
		return configError("tls-key", "required with --tls-ca and --tls-cert")
	}
	if c.HTTPTLS && tlsSet == 0 {
		return configError("http-tls", "needs --tls-cert and --tls-key")
	}
	if c.HTTPTokenFile == "" && !isLoopback(c.HTTPAddr) && !c.InsecureDev {
		return configError("http-token-file", "required when --http-addr %s is not a loopback address", c.HTTPAddr)
	}
	return nil
}

// clustered reports whether the agent joins or forms a cluster (it has
// TLS material); otherwise it runs a standalone node (--insecure-dev).
func (c *agentConfig) clustered() bool { return c.TLSCert != "" }

// parseHostPort checks host:port (host may be empty, port 0..65535).
func parseHostPort(s string) (int, error) {
	_, p, err := net.SplitHostPort(s)
	if err != nil {
		return 0, err
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil || port < 0 || port > 65535 || fmt.Sprint(port) != p {
		return 0, fmt.Errorf("bad port %q", p)
	}
	return port, nil
}

// isLoopback reports whether host:port binds a loopback address only.
func isLoopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, errors.New("unknown level")
}

// tlsMaterial is what --tls-* and --gossip-key-file load.
type tlsMaterial struct {
	cert tls.Certificate
	pool *x509.CertPool
	keys [][]byte // gossip keys; nil: gossip unencrypted
}

// maxPEMFile bounds a TLS file: certificates, a key, a bundle of CAs.
const maxPEMFile = 1 << 20

// loadMaterial reads the TLS files and the gossip keys; errors name the
// flag.
func (c *agentConfig) loadMaterial(getenv func(string) string) (tlsMaterial, error) {
	var m tlsMaterial
	if c.clustered() {
		certPEM, err := readSmallFile(c.TLSCert, maxPEMFile)
		if err != nil {
			return m, configError("tls-cert", "%v", err)
		}
		keyPEM, err := readSmallFile(c.TLSKey, maxPEMFile)
		if err != nil {
			return m, configError("tls-key", "%v", err)
		}
		if !hasPEM(keyPEM, "PRIVATE KEY") {
			return m, configError("tls-key", "%s holds no PEM private key", c.TLSKey)
		}
		if !hasPEM(certPEM, "CERTIFICATE") {
			return m, configError("tls-cert", "%s holds no PEM certificate", c.TLSCert)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return m, configError("tls-key", "%s with the certificate %s: %v", c.TLSKey, c.TLSCert, err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return m, configError("tls-cert", "%v", err)
		}
		if len(leaf.DNSNames) == 0 || leaf.DNSNames[0] != c.Name {
			return m, configError("tls-cert", "%s: its first DNS name must be the node name %q", c.TLSCert, c.Name)
		}
		cert.Leaf = leaf
		m.cert = cert
		caPEM, err := readSmallFile(c.TLSCA, maxPEMFile)
		if err != nil {
			return m, configError("tls-ca", "%v", err)
		}
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(caPEM) {
			return m, configError("tls-ca", "%s holds no PEM certificate", c.TLSCA)
		}
		// Every certificate in it must be a CA's (several during a CA
		// rotation): a node's own certificate given by mistake verifies
		// no peer, and the node would only fail to link, silently.
		for rest := caPEM; ; {
			var blk *pem.Block
			if blk, rest = pem.Decode(rest); blk == nil {
				break
			}
			if blk.Type != "CERTIFICATE" {
				continue
			}
			ca, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return m, configError("tls-ca", "%s: %v", c.TLSCA, err)
			}
			if !ca.IsCA {
				return m, configError("tls-ca", "%s holds a certificate that is not a CA's (%q): give the cluster CA's certificate", c.TLSCA, ca.Subject.CommonName)
			}
		}
		// Likewise a certificate the CA did not issue, or one out of its
		// validity period: every peer would refuse it.
		if err := verifyNodeCert(cert, m.pool, time.Now()); err != nil {
			return m, configError("tls-cert", "%s: %v", c.TLSCert, err)
		}
	}
	switch {
	case c.GossipKeyFile != "":
		b, err := readSmallFile(c.GossipKeyFile, maxPEMFile)
		if err != nil {
			return m, configError("gossip-key-file", "%v", err)
		}
		keys, err := membership.ParseKeys(b)
		if err != nil {
			return m, configError("gossip-key-file", "%s: %v", c.GossipKeyFile, err)
		}
		m.keys = keys
	default:
		v := getenv(membership.KeyEnv)
		if strings.TrimSpace(v) != "" {
			keys, err := membership.ParseKeys([]byte(v))
			if err != nil {
				return m, configError("gossip-key-file", "$%s: %v", membership.KeyEnv, err)
			}
			m.keys = keys
		}
	}
	if c.clustered() && len(m.keys) == 0 && !c.InsecureDev {
		// As the HTTP token off loopback: unencrypted gossip lets anyone
		// who reaches the port join it and accuse live members (each
		// accusation a failover), so a cluster node does not run without
		// a key unless told to.
		return m, configError("gossip-key-file", "a cluster node needs a gossip key (--gossip-key-file or $%s; tempest keygen makes one); --insecure-dev runs without", membership.KeyEnv)
	}
	return m, nil
}

// hasPEM reports whether data holds a PEM block whose type ends in
// typ ("PRIVATE KEY" matches the PKCS #8, EC and RSA forms).
func hasPEM(data []byte, typ string) bool {
	for {
		var blk *pem.Block
		if blk, data = pem.Decode(data); blk == nil {
			return false
		}
		if strings.HasSuffix(blk.Type, typ) {
			return true
		}
	}
}

// verifyNodeCert checks that cert chains to pool, as a node's own for
// both ends of a link, and is valid at now.
func verifyNodeCert(cert tls.Certificate, pool *x509.CertPool, now time.Time) error {
	leaf := cert.Leaf
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("expired on %s: issue a new one (tempest certs node)", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	// One not valid yet by this machine's clock is left to the peers,
	// whose clocks judge it: this one may be behind.
	if now.Before(leaf.NotBefore) {
		now = leaf.NotBefore
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return fmt.Errorf("does not verify against the CA of --tls-ca, so no peer would accept it: %w", err)
		}
	}
	return nil
}

// newLogger builds the process logger from --log-level and --log-format.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	lv, _ := parseLevel(level)
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// validHostName reports whether s is a DNS host name (RFC 1123 labels:
// letters, digits and inner hyphens, dot-separated; no port).
func validHostName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
