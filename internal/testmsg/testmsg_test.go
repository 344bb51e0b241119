package testmsg

import (
	"testing"

	"github.com/tempest-actors/tempest/wire/bare/gen"
)

func TestCodeIsFresh(t *testing.T) {
	if err := gen.CheckFile("testmsg.bare", "testmsg_bare.go", "testmsg"); err != nil {
		t.Fatalf("%v (run go generate ./internal/testmsg)", err)
	}
}
