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
// A binary with durable workflows (package workflow) registers them too,
// and `serve` runs them beside the worlds:
//
//	orrery.MainWith(orrery.App{
//		Worlds:    []world.Kernel{ledger.AccountDef().Kernel(), ledger.TransferDef().Kernel()},
//		Workflows: []workflow.Workflow{ledger.PayoutDef()},
//	})
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
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
	"github.com/orrery-run/orrery/world"
)

// App is what a binary serves: its worlds and its durable workflows, and
// the effects they ask for: the binary's own adapters with their retry
// policies, the settings of the built-in http.request adapter, and retry
// policies by kind that replace a built-in's or a registration's (see
// docs/effects.md for the defaults).
//
//	orrery.MainWith(orrery.App{
//		Worlds:   []world.Kernel{shop.OrderDef().Kernel()},
//		Adapters: []adapter.Registration{adapter.Register(mailer, adapter.RetryPolicy{Attempts: 5})},
//		HTTP:     adapter.HTTPConfig{Client: &http.Client{Transport: mtlsTransport}, Timeout: 10 * time.Second},
//		Retry:    map[string]adapter.RetryPolicy{adapter.KindHTTP: {Max: time.Minute, NonRetryable: []string{adapter.ClassHTTPTransport}}},
//	})
type App struct {
	Worlds    []world.Kernel
	Workflows []workflow.Workflow
	// Adapters serve the binary's own effect kinds (a registration of
	// http.request or fabric.send replaces the built-in).
	Adapters []adapter.Registration
	// HTTP configures the built-in http.request adapter: its *http.Client
	// (transport, TLS, proxy, redirects), the default request timeout and
	// the largest response body.
	HTTP adapter.HTTPConfig
	// Retry replaces the retry policy of a kind, built-in or registered.
	Retry map[string]adapter.RetryPolicy
	// RetryPolicies is Retry under the name the workflow docs use: both
	// are read, and one kind named in both is an error (two policies for
	// one kind would leave which one runs to chance).
	RetryPolicies map[string]adapter.RetryPolicy
	// Projectors are the binary's read models of its workflow runs: serve
	// feeds each every event of every run (see workflow/projector). They
	// need Workflows.
	Projectors []projector.Projector
}

// MainWith runs the orrery command line with app's worlds and workflows
// and exits with the command's exit code.
func MainWith(app App) {
	ca, err := app.cli()
	if err != nil {
		fmt.Fprintln(os.Stderr, "orrery:", err)
		os.Exit(cli.ExitUsage)
	}
	os.Exit(cli.RunApp(context.Background(), os.Args[1:], cli.StdIO(), ca))
}

// cli checks app's definitions: the worlds as Kernels does, the workflows
// as workflow.NewWorkflows does (none: nil, so serve runs no workflow
// worker).
func (a App) cli() (cli.App, error) {
	ks, err := Kernels(a.Worlds...)
	if err != nil {
		return cli.App{}, err
	}
	for i, r := range a.Adapters {
		if r.Adapter == nil {
			return cli.App{}, fmt.Errorf("adapter registration %d has no adapter", i)
		}
		if err := r.Policy.Validate(); err != nil {
			return cli.App{}, fmt.Errorf("adapter %T: %w", r.Adapter, err)
		}
	}
	retry := a.Retry
	if len(a.RetryPolicies) > 0 {
		retry = make(map[string]adapter.RetryPolicy, len(a.Retry)+len(a.RetryPolicies))
		for kind, p := range a.Retry {
			retry[kind] = p
		}
		for kind, p := range a.RetryPolicies {
			if _, dup := retry[kind]; dup {
				return cli.App{}, fmt.Errorf("retry policy of %s given in both Retry and RetryPolicies", kind)
			}
			retry[kind] = p
		}
	}
	for kind, p := range retry {
		if err := p.Validate(); err != nil {
			return cli.App{}, fmt.Errorf("retry policy of %s: %w", kind, err)
		}
	}
	for i, p := range a.Projectors {
		if p == nil {
			return cli.App{}, fmt.Errorf("projector %d is nil", i)
		}
	}
	if len(a.Projectors) > 0 && len(a.Workflows) == 0 {
		return cli.App{}, fmt.Errorf("projectors read workflow runs, and this app has no workflows")
	}
	out := cli.App{Kernels: ks, Adapters: a.Adapters, HTTP: a.HTTP, Retry: retry, Projectors: a.Projectors}
	if len(a.Workflows) > 0 {
		if out.Workflows, err = workflow.NewWorkflows(a.Workflows...); err != nil {
			return cli.App{}, err
		}
	}
	return out, nil
}

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
