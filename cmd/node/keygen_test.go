package main

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/tempest-actors/tempest/membership"
)

func TestKeygenPrintsRandomKey(t *testing.T) {
	gen := func() string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(t.Context(), []string{"keygen"}, strings.NewReader(""), &out, &errOut); err != nil {
			t.Fatalf("keygen: %v (stderr %q)", err, errOut.String())
		}
		if errOut.Len() != 0 {
			t.Fatalf("keygen wrote to stderr: %q", errOut.String())
		}
		return out.String()
	}
	out := gen()
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("output %q is not one line", out)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil || len(raw) != 32 {
		t.Fatalf("output %q: %d bytes, err %v; want 32 bytes of base64", out, len(raw), err)
	}
	if _, err := membership.ParseKeys([]byte(out)); err != nil {
		t.Fatalf("output does not load as a key file: %v", err)
	}
	if gen() == out {
		t.Fatal("two runs printed the same key")
	}
}

func TestKeygenRejectsArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"keygen", "extra"}, strings.NewReader(""), &out, &errOut); err == nil {
		t.Fatal("keygen with an argument succeeded")
	}
}
