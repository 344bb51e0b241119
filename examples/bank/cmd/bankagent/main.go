// Command bankagent is the tempest command with the bank example's
// account kind registered: `bankagent agent ...` runs a node that hosts
// accounts beside the demo kinds, `bankagent dev` a local cluster of such
// nodes (docs/first-kind.md, "Your kinds under the agent").
package main

import (
	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/cli"
	"github.com/tempest-actors/tempest/examples/bank"
)

func main() {
	cli.Main(cli.Options{Name: "bankagent", Register: func(n *tempest.Node) error {
		return bank.Register(n)
	}})
}
