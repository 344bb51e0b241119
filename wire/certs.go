package wire

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// File names inside a certificate directory. Key files are written with
// mode 0600, certificates with 0644.
const (
	CACertFile   = "ca.pem"
	CAKeyFile    = "ca-key.pem"
	NodeCertFile = "node.pem"
	NodeKeyFile  = "node-key.pem"
)

// ALPN is the application protocol negotiated on every node-to-node QUIC
// connection. A peer that does not offer it is refused during the handshake.
const ALPN = "tempest/1"

// ErrBadCertificate reports a certificate that does not chain to the
// cluster CA, is outside its validity period, or does not name the node it
// claims to be.
var ErrBadCertificate = errors.New("wire: bad peer certificate")

// CA is a cluster certificate authority: the root every node certificate
// chains to. It is only needed where node certificates are issued; a
// running node needs just the CA certificate (see [LoadCAPool]).
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA creates a self-signed ECDSA P-256 cluster CA valid from now for
// validity. name is the subject common name (for operators; nothing
// checks it).
func NewCA(name string, now time.Time, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("wire: generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"tempest"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("wire: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// NodeCertRequest describes a node certificate to issue.
type NodeCertRequest struct {
	// Name is the node name. It becomes the subject common name and the
	// first DNS subject alternative name; peers check it against the name
	// the node claims in its Hello.
	Name string
	// DNS and IPs are extra subject alternative names (e.g. the pod's
	// service name and address); they are not used for node identity.
	DNS []string
	IPs []net.IP
	// NotBefore and Validity bound the certificate's lifetime.
	NotBefore time.Time
	Validity  time.Duration
}

// Issue creates a node certificate and key signed by the CA. The
// certificate is valid for both TLS server and client authentication,
// since each node dials and accepts.
func (ca *CA) Issue(req NodeCertRequest) (certPEM, keyPEM []byte, err error) {
	if err := ValidateNodeName(req.Name); err != nil {
		return nil, nil, err
	}
	if req.Validity <= 0 {
		return nil, nil, errors.New("wire: certificate validity must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("wire: generate node key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	dns := []string{req.Name}
	for _, d := range req.DNS {
		if d != "" && !slices.Contains(dns, d) {
			dns = append(dns, d)
		}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Name, Organization: []string{"tempest"}},
		NotBefore:    req.NotBefore,
		NotAfter:     req.NotBefore.Add(req.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
		IPAddresses:  req.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("wire: create node certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}

// ValidateNodeName checks that name can serve as a node identity: a
// non-empty DNS-style name of letters, digits, '-', '_' and '.', at most
// 253 bytes. Node names appear in certificates, so they must be spelled
// the same everywhere (no case folding happens).
func ValidateNodeName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("wire: invalid node name %q: length must be 1..253", name)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_'
		if !ok {
			return fmt.Errorf("wire: invalid node name %q: only letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// PEM returns the CA certificate and key in PEM form.
func (ca *CA) PEM() (certPEM, keyPEM []byte, err error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}

// WriteCA writes ca.pem and ca-key.pem into dir (created with mode 0700
// if missing). It refuses to overwrite an existing CA key, since that
// would orphan every certificate issued so far.
func WriteCA(dir string, ca *CA) error {
	certPEM, keyPEM, err := ca.PEM()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, CACertFile), certPEM, 0o644)
}

// WriteCACert writes certPEM as dir/ca.pem (replacing it atomically),
// without a key: the CA certificate that nodes verify peers with, kept
// apart from the CA key.
func WriteCACert(dir string, certPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, CACertFile), certPEM, 0o644)
}

// LoadCA reads ca.pem and ca-key.pem from dir.
func LoadCA(dir string) (*CA, error) {
	cert, err := readCert(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	k, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("wire: %s: %w", CAKeyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("wire: %s: not an ECDSA key", CAKeyFile)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("wire: %s is not a CA certificate", CACertFile)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCAPool reads the CA certificate(s) in dir/ca.pem (several may be
// concatenated during a CA rotation) into a pool for peer verification.
func LoadCAPool(dir string) (*x509.CertPool, error) {
	data, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("wire: %s holds no certificate", CACertFile)
	}
	return pool, nil
}

// WriteNodeCert writes node.pem and node-key.pem into dir (mode 0600 for
// the key). Existing files are replaced atomically, which is how a
// certificate is rotated on disk.
func WriteNodeCert(dir string, certPEM, keyPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, NodeKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, NodeCertFile), certPEM, 0o644)
}

// LoadNodeCert reads node.pem and node-key.pem from dir.
func LoadNodeCert(dir string) (tls.Certificate, error) {
	return tls.LoadX509KeyPair(filepath.Join(dir, NodeCertFile), filepath.Join(dir, NodeKeyFile))
}

// StatelessResetKeyFrom derives a stable 32-byte QUIC stateless reset key
// from a node's private key, so a restarted node with the same key resets
// its peers' stale connections at once.
func StatelessResetKeyFrom(cert tls.Certificate) ([32]byte, error) {
	var out [32]byte
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok || signer == nil {
		return out, errors.New("wire: certificate has no private key")
	}
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return out, err
	}
	h := sha256.New()
	h.Write([]byte("tempest stateless reset key v1\x00"))
	h.Write(der)
	copy(out[:], h.Sum(nil))
	return out, nil
}

// certName returns the node name of a node certificate: its first DNS
// SAN, or the common name when it has none.
func certName(c *x509.Certificate) string {
	if len(c.DNSNames) > 0 {
		return c.DNSNames[0]
	}
	return c.Subject.CommonName
}

// verifyChain checks raw peer certificates against the CA pool at time
// now for the given usage and returns the leaf.
func verifyChain(raw [][]byte, pool *x509.CertPool, now time.Time, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: no certificate presented", ErrBadCertificate)
	}
	certs := make([]*x509.Certificate, 0, len(raw))
	for _, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadCertificate, err)
		}
		certs = append(certs, c)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCertificate, err)
	}
	return certs[0], nil
}

// certHasName reports whether the verified leaf certifies node name. Only
// the node name SAN (the first DNS name) counts, exactly; wildcards and
// extra --dns names never make a node identity.
func certHasName(c *x509.Certificate, name string) bool {
	return name != "" && certName(c) == name
}

// credentials are the certificate a node presents and the CA pool it
// checks peers against. They are swapped as a unit on rotation.
type credentials struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

func staticCreds(cert tls.Certificate, pool *x509.CertPool) func() *credentials {
	c := &credentials{cert: &cert, pool: pool}
	return func() *credentials { return c }
}

func rawCerts(cs tls.ConnectionState) [][]byte {
	raw := make([][]byte, len(cs.PeerCertificates))
	for i, c := range cs.PeerCertificates {
		raw[i] = c.Raw
	}
	return raw
}

// serverTLS is the TLS configuration for accepting peers: TLS 1.3 only,
// ALPN tempest/1, a client certificate required and verified against the
// cluster CA. The claimed node name is checked later, against the Hello.
// creds is read per handshake, so rotated credentials apply to new
// connections.
// rejected, if set, is told of every handshake refused for its client
// certificate, a missing one included.
func serverTLS(creds func() *credentials, now func() time.Time, rejected func(error)) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{ALPN},
		// Requested, not required: crypto/tls would refuse a handshake
		// without one before VerifyConnection runs, so uncounted and
		// unlogged. VerifyConnection refuses it instead.
		ClientAuth: tls.RequestClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return creds().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			var err error
			if len(cs.PeerCertificates) == 0 {
				err = errNoClientCert
			} else {
				_, err = verifyChain(rawCerts(cs), creds().pool, now(), x509.ExtKeyUsageClientAuth)
			}
			if err != nil && rejected != nil {
				rejected(err)
			}
			return err
		},
		SessionTicketsDisabled: true,
	}
}

// errNoClientCert refuses a handshake in which the client presented no
// certificate.
var errNoClientCert = fmt.Errorf("%w: no client certificate presented", ErrBadCertificate)

// clientTLS is the TLS configuration for dialing peer: the server's chain
// must verify against the cluster CA and its node name must be peer.
// Go's own hostname verification is replaced (InsecureSkipVerify plus
// VerifyConnection) so the clock is injectable and the name match is
// exact.
func clientTLS(creds func() *credentials, now func() time.Time, peer string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{ALPN},
		ServerName: peer,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return creds().cert, nil
		},
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			leaf, err := verifyChain(rawCerts(cs), creds().pool, now(), x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if !certHasName(leaf, peer) {
				return fmt.Errorf("%w: certificate names %q, dialed %q", ErrBadCertificate, certName(leaf), peer)
			}
			return nil
		},
		SessionTicketsDisabled: true,
	}
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("wire: %s: no PEM certificate", path)
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseKey(data []byte) (any, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	switch block.Type {
	case "PRIVATE KEY":
		return x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	}
	return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
}

// writeFile replaces path atomically with data at mode perm.
func writeFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name) // no-op after a successful rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(name, path)
}

// writeNew is writeFile that fails if path already exists.
func writeNew(path string, data []byte, perm os.FileMode) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("wire: %s already exists; refusing to overwrite", path)
	}
	return writeFile(path, data, perm)
}
