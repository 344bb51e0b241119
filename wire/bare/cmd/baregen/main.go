// Command baregen generates Go code from a BARE schema. Run it from a
// go:generate directive next to the schema:
//
//	//go:generate go run github.com/tempest-actors/tempest/wire/bare/cmd/baregen -schema envelope.bare -package wire -out envelope_bare.go
//
// With -check it writes nothing and exits 1 when -out is not what the
// schema generates (for CI).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/tempest-actors/tempest/wire/bare/gen"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "baregen:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("baregen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	schema := fs.String("schema", "", "BARE schema file (required)")
	pkg := fs.String("package", "", "Go package name (default: $GOPACKAGE)")
	out := fs.String("out", "", "output Go file (default: stdout)")
	check := fs.Bool("check", false, "only report whether -out is up to date")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *schema == "" {
		return fmt.Errorf("-schema is required")
	}
	if *pkg == "" {
		*pkg = os.Getenv("GOPACKAGE")
	}
	if *check {
		return gen.CheckFile(*schema, *out, *pkg)
	}
	src, err := gen.GenerateFile(*schema, *pkg)
	if err != nil {
		return err
	}
	switch {
	case *out == "":
		_, err = os.Stdout.Write(src)
		return err
	default:
		return os.WriteFile(*out, src, 0o644)
	}
}
