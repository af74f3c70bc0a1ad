// Package orrery is the entry point of a binary that runs durable worlds:
// Main gives it the whole orrery command line (serve, demo, the world,
// journal, lease, effect, timer and worker commands, and the lab's triage
// commands) with the caller's worlds, the way a Temporal worker binary
// registers its workflows.
//
//	func main() {
//		orrery.Main(ledger.AccountDef().Kernel(), ledger.TransferDef().Kernel())
//	}
//
// The packages below it are the library: world (the kernel a world is
// written with), plane (hosts, client, orchestrator), store and its
// backends, api (the HTTP API and its Go client), actor, supervisor,
// registry and lab.
package orrery

import (
	"context"
	"fmt"
	"os"

	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/world"
)

// Main runs the orrery command line with worlds (each world definition's
// universe is its name) and exits with the command's exit code.
func Main(worlds ...world.Kernel) {
	kernels, err := Kernels(worlds...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "orrery:", err)
		os.Exit(cli.ExitUsage)
	}
	os.Exit(cli.Run(context.Background(), os.Args[1:], cli.StdIO(), kernels))
}

// Kernels maps each world definition to its universe (its name); two
// definitions of one name, a definition with errors, or a nil one are an
// error.
func Kernels(worlds ...world.Kernel) (plane.Kernels, error) {
	ks := plane.Kernels{}
	for i, k := range worlds {
		if k == nil {
			return nil, fmt.Errorf("world definition %d is nil", i)
		}
		if err := k.Err(); err != nil {
			return nil, err
		}
		if _, dup := ks[k.Name()]; dup {
			return nil, fmt.Errorf("two world definitions named %q", k.Name())
		}
		ks[k.Name()] = k
	}
	return ks, nil
}
