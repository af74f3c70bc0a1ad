// Command orrery runs durable worlds: `orrery demo` for a narrated tour,
// `orrery serve` for a node (on an embedded SQLite file by default, or
// PostgreSQL for a cluster), and the commands that operate a running
// server. This binary hosts the example ledger worlds (accounts and a
// transfer saga); a binary of your own hosts yours through orrery.Main.
package main

import (
	"github.com/orrery-run/orrery"
	"github.com/orrery-run/orrery/examples/ledger"
)

func main() {
	orrery.Main(ledger.AccountDef().Kernel(), ledger.TransferDef().Kernel())
}
