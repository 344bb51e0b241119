package membership

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// KeyEnv is the environment variable conventionally holding gossip keys
// (base64, the primary first, separated by commas).
const KeyEnv = "TEMPEST_GOSSIP_KEY"

// KeySize is the size of keys made by NewKey: 32 bytes selects AES-256.
const KeySize = 32

// Key errors.
var (
	// ErrInvalidKey reports a key that is not base64 of 16, 24 or 32 bytes.
	ErrInvalidKey = errors.New("membership: invalid gossip key")
	// ErrNoKey reports a key file or variable holding no key.
	ErrNoKey = errors.New("membership: no gossip key")
)

// NewKey returns a new random 32-byte gossip key.
func NewKey() ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("membership: generating key: %w", err)
	}
	return k, nil
}

// EncodeKey returns the text form of a key: standard base64.
func EncodeKey(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// ParseKey decodes the text form of a key (standard base64, surrounding
// spaces ignored) and checks its size: 16, 24 or 32 bytes.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64: %w", ErrInvalidKey, err)
	}
	if err := validateKey(k); err != nil {
		return nil, err
	}
	return k, nil
}

func validateKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%w: %d bytes, want 16, 24 or 32", ErrInvalidKey, len(k))
}

// ParseKeys parses keys separated by newlines or commas; blank lines and
// lines starting with '#' are ignored. The first key is the primary one.
// It returns ErrNoKey when there is none.
func ParseKeys(text []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for f := range strings.SplitSeq(l, ",") {
			if strings.TrimSpace(f) == "" {
				continue
			}
			k, err := ParseKey(f)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			keys = append(keys, k)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, ErrNoKey
	}
	return keys, nil
}

// LoadKeyFile reads gossip keys from a file (see ParseKeys): usually one
// base64 key as printed by `tempest keygen`; during a rotation, more lines.
func LoadKeyFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("membership: gossip key file: %w", err)
	}
	keys, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("membership: gossip key file %s: %w", path, err)
	}
	return keys, nil
}

// KeysFromEnv reads gossip keys from the environment variable name (see
// ParseKeys). An unset or empty variable returns (nil, nil): no encryption.
func KeysFromEnv(name string) ([][]byte, error) {
	v := os.Getenv(name)
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	keys, err := ParseKeys([]byte(v))
	if err != nil {
		return nil, fmt.Errorf("membership: $%s: %w", name, err)
	}
	return keys, nil
}
