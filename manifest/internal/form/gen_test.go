package form

import (
	"testing"

	"github.com/tempest-actors/tempest/wire/bare/gen"
)

func TestGeneratedUpToDate(t *testing.T) {
	if err := gen.CheckFile("manifest.bare", "manifest_bare.go", "form"); err != nil {
		t.Fatalf("%v (run go generate ./manifest/...)", err)
	}
}
