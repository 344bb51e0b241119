package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunWritesAndChecks(t *testing.T) {
	dir := t.TempDir()
	schema := filepath.Join(dir, "m.bare")
	out := filepath.Join(dir, "m_bare.go")
	if err := os.WriteFile(schema, []byte("type M struct { id: uint }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-schema", schema, "-package", "m", "-out", out}, io.Discard); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(src), "package m") || !strings.Contains(string(src), "from m.bare;") {
		t.Fatalf("output %q, %v", src, err)
	}
	if err := run([]string{"-schema", schema, "-package", "m", "-out", out, "-check"}, io.Discard); err != nil {
		t.Fatalf("fresh output reported stale: %v", err)
	}
	if err := os.WriteFile(schema, []byte("type M struct { id: int }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-schema", schema, "-package", "m", "-out", out, "-check"}, io.Discard); err == nil {
		t.Fatal("stale output passed -check")
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.bare")
	if err := os.WriteFile(bad, []byte("type M struct {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOPACKAGE", "")
	for _, args := range [][]string{
		{},
		{"-schema", bad, "-package", "m"},
		{"-schema", filepath.Join(dir, "none.bare"), "-package", "m"},
		{"-bogus"},
	} {
		if err := run(args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	err := run([]string{"-schema", bad, "-package", "m"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "bad.bare:1:8: a struct needs at least one field") {
		t.Errorf("schema error = %v", err)
	}
}
