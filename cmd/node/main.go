// Command tempest runs a Tempest node and talks to running nodes: the
// tempest command of package cli, with the demo kinds only.
package main

import "github.com/tempest-actors/tempest/cli"

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { cli.Main(cli.Options{Version: version}) }
