package membership

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func sampleMeta() Meta {
	return Meta{
		Name:           "node-a",
		QUICAddr:       "10.0.0.1:7947",
		HTTPAddr:       "127.0.0.1:7948",
		ManifestDigest: "sha256:0123456789abcdef",
		Kinds:          []string{"cart", "account", "cart"},
		Version:        "v1.2.3",
		BootID:         42,
		DataID:         "5f0c2a9e81d34b7c9a0e6f12d3c4b5a6",
		InCluster:      true,
	}
}

func TestMetaRoundTrip(t *testing.T) {
	in := sampleMeta()
	enc, err := in.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMeta(enc)
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.Kinds = []string{"account", "cart"} // sorted, unique
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got.Truncated() {
		t.Fatal("short kind list reported truncated")
	}
}

func TestMetaEmptyRoundTrip(t *testing.T) {
	enc, err := Meta{Name: "x"}.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMeta(enc)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Meta{Name: "x"}); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestMetaKindsTruncatedToDigest(t *testing.T) {
	m := sampleMeta()
	m.Kinds = nil
	for i := range 100 {
		m.Kinds = append(m.Kinds, fmt.Sprintf("kind-number-%03d", i))
	}
	enc, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) > MetaLimit {
		t.Fatalf("encoded %d bytes, limit %d", len(enc), MetaLimit)
	}
	got, err := decodeMeta(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Truncated() || len(got.Kinds) != 0 {
		t.Fatalf("got kinds %v digest %q, want truncated", got.Kinds, got.KindsDigest)
	}
	if got.KindsDigest != KindsDigest(m.Kinds) {
		t.Fatalf("digest %q, want %q", got.KindsDigest, KindsDigest(m.Kinds))
	}
	// The digest does not depend on order or duplicates.
	rev := append([]string{m.Kinds[0]}, m.Kinds...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if KindsDigest(rev) != got.KindsDigest {
		t.Fatal("digest depends on order or duplicates")
	}
}

func TestMetaTooLarge(t *testing.T) {
	m := sampleMeta()
	m.ManifestDigest = strings.Repeat("d", MetaLimit)
	_, err := m.encode()
	var tl *MetaTooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("err = %v, want *MetaTooLargeError", err)
	}
	if tl.Limit != MetaLimit || tl.Size <= MetaLimit {
		t.Fatalf("got size %d limit %d", tl.Size, tl.Limit)
	}
	cfg := Config{Name: "node-a", Meta: m}
	if err := cfg.Validate(); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("Validate = %v, want ErrMetaTooLarge", err)
	}
}

func TestMetaLargestThatFits(t *testing.T) {
	// Exactly at the limit is accepted; one byte more is not.
	base := Meta{Name: "n"}
	enc, _ := base.encode()
	room := MetaLimit - len(enc)
	// The digest's length prefix grows from 1 to 2 bytes at 128.
	m := base
	m.ManifestDigest = strings.Repeat("x", room-1)
	if enc, err := m.encode(); err != nil || len(enc) != MetaLimit {
		t.Fatalf("at the limit: len %d err %v", len(enc), err)
	}
	m.ManifestDigest += "x"
	if _, err := m.encode(); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("over the limit: err %v", err)
	}
}

func TestDecodeMetaRejectsGarbage(t *testing.T) {
	good, _ := sampleMeta().encode()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"version 0": {0},
		"truncated": good[:len(good)-3],
		"huge len":  {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		if _, err := decodeMeta(b); !errors.Is(err, ErrBadMeta) {
			t.Errorf("%s: err = %v, want ErrBadMeta", name, err)
		}
	}
}

func TestDecodeMetaIgnoresLaterFields(t *testing.T) {
	enc, _ := sampleMeta().encode()
	enc[0] = 7 // a later version appends fields
	enc = append(enc, 3, 'n', 'e', 'w')
	got, err := decodeMeta(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "node-a" || len(got.Kinds) != 2 {
		t.Fatalf("got %+v", got)
	}
}

// A version 1 encoding (nodes built before DataID and InCluster) decodes
// with neither.
func TestDecodeMetaVersion1(t *testing.T) {
	m := sampleMeta()
	enc, _ := m.encode()
	enc[0] = 1
	enc = enc[:len(enc)-1-len(m.DataID)] // version 1 ends after the kinds
	got, err := decodeMeta(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.DataID != "" || got.Name != "node-a" || len(got.Kinds) != 2 {
		t.Fatalf("got %+v", got)
	}
}

func FuzzDecodeMeta(f *testing.F) {
	good, _ := sampleMeta().encode()
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{1})
	m := sampleMeta()
	for i := range 60 {
		m.Kinds = append(m.Kinds, fmt.Sprintf("k%04d-%s", i, strings.Repeat("z", 8)))
	}
	trunc, _ := m.encode()
	f.Add(trunc)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		enc := m.normalize().appendTo(nil, m.Truncated())
		again, err := decodeMeta(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(again, m.normalize()) && !m.Truncated() {
			t.Fatalf("got %+v, want %+v", again, m.normalize())
		}
	})
}
