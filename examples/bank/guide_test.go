package bank_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
)

// TestGuideSnippetsCompile keeps docs/first-kind.md honest: every Go
// snippet in it must be a verbatim piece of this package's sources or its
// programs' (which the build compiles and these tests run), and its BARE
// schema must parse.
func TestGuideSnippetsCompile(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "first-kind.md"))
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	files, _ := filepath.Glob("*.go")
	programs, _ := filepath.Glob(filepath.Join("cmd", "*", "*.go"))
	files = append(files, programs...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	blocks := regexp.MustCompile("(?s)```(go)?\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	goBlocks := 0
	for _, b := range blocks {
		body := b[2]
		switch {
		case b[1] == "go":
			goBlocks++
			if !strings.Contains(src.String(), body) {
				t.Errorf("snippet not in examples/bank or its programs:\n%s", body)
			}
		case strings.HasPrefix(body, "type "), strings.HasPrefix(body, "# @tag"):
			if _, err := bare.ParseSchema("first-kind.md", []byte(body)); err != nil {
				t.Errorf("schema snippet: %v", err)
			}
		}
	}
	if goBlocks < 8 {
		t.Fatalf("found %d Go snippets; the guide has more", goBlocks)
	}
}
