// Command orrery runs durable worlds: `orrery demo` for a narrated tour,
// `orrery serve` for a node (on an embedded SQLite file by default, or
// PostgreSQL for a cluster), and the commands that operate a running
// server. This binary hosts the example ledger worlds (accounts and a
// transfer saga) and its payout workflow; a binary of your own hosts yours
// through orrery.Main or orrery.MainWith.
package main

import (
	"github.com/orrery-run/orrery"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

func main() { orrery.MainWith(app()) }

// app is what this binary serves. The cluster tests' servers serve it too,
// with their own worlds and workflow added, through the same MainWith, so
// they run the shipped binary's shape.
func app() orrery.App {
	return orrery.App{
		Worlds:    []world.Kernel{ledger.AccountDef().Kernel(), ledger.TransferDef().Kernel()},
		Workflows: []workflow.Workflow{ledger.PayoutDef()},
	}
}
