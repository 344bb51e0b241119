package membership_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tempest-actors/tempest/membership"
)

func TestNewKeyRoundTrip(t *testing.T) {
	k, err := membership.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if len(k) != 32 {
		t.Fatalf("key is %d bytes, want 32", len(k))
	}
	k2, _ := membership.NewKey()
	if bytes.Equal(k, k2) {
		t.Fatal("two new keys are equal")
	}
	got, err := membership.ParseKey(membership.EncodeKey(k) + "\n")
	if err != nil || !bytes.Equal(got, k) {
		t.Fatalf("ParseKey = %x, %v; want %x", got, err, k)
	}
}

func TestParseKeySizes(t *testing.T) {
	for n, ok := range map[int]bool{16: true, 24: true, 32: true, 0: false, 8: false, 31: false, 33: false, 64: false} {
		s := base64.StdEncoding.EncodeToString(make([]byte, n))
		_, err := membership.ParseKey(s)
		if ok != (err == nil) {
			t.Errorf("%d bytes: err = %v", n, err)
		}
		if err != nil && !errors.Is(err, membership.ErrInvalidKey) {
			t.Errorf("%d bytes: err = %v, want ErrInvalidKey", n, err)
		}
	}
	if _, err := membership.ParseKey("not base64!"); !errors.Is(err, membership.ErrInvalidKey) {
		t.Fatalf("err = %v, want ErrInvalidKey", err)
	}
}

func TestLoadKeyFile(t *testing.T) {
	k1, _ := membership.NewKey()
	k2, _ := membership.NewKey()
	path := filepath.Join(t.TempDir(), "gossip.key")
	text := "# rotation in progress\n" + membership.EncodeKey(k1) + "\n\n" + membership.EncodeKey(k2) + "\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := membership.LoadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !bytes.Equal(keys[0], k1) || !bytes.Equal(keys[1], k2) {
		t.Fatalf("got %d keys, want k1 then k2", len(keys))
	}

	empty := filepath.Join(t.TempDir(), "empty.key")
	if err := os.WriteFile(empty, []byte("# nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := membership.LoadKeyFile(empty); !errors.Is(err, membership.ErrNoKey) {
		t.Fatalf("empty file: err = %v, want ErrNoKey", err)
	}
	if _, err := membership.LoadKeyFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v", err)
	}
}

func TestKeysFromEnv(t *testing.T) {
	k1, _ := membership.NewKey()
	k2, _ := membership.NewKey()
	t.Setenv(membership.KeyEnv, membership.EncodeKey(k1)+", "+membership.EncodeKey(k2))
	keys, err := membership.KeysFromEnv(membership.KeyEnv)
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], k1) {
		t.Fatalf("got %d keys, %v", len(keys), err)
	}
	t.Setenv(membership.KeyEnv, "")
	if keys, err := membership.KeysFromEnv(membership.KeyEnv); keys != nil || err != nil {
		t.Fatalf("unset: got %v, %v; want nil, nil", keys, err)
	}
	t.Setenv(membership.KeyEnv, "garbage")
	if _, err := membership.KeysFromEnv(membership.KeyEnv); !errors.Is(err, membership.ErrInvalidKey) {
		t.Fatalf("garbage: err = %v", err)
	}
}
