package plane

import (
	"slices"
	"strconv"
	"strings"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/world"
)

// Roles a process of the plane takes on (a worker class). A process
// advertises each one it runs as RoleCapability(role) in its heartbeats
// (store.Advertise), and the placement of worlds reads them.
const (
	RoleHost         = "host"         // runs worlds (and workflow runs)
	RoleEffects      = "effects"      // an effect adapter pool
	RoleTimers       = "timers"       // the durable timer worker
	RoleAPI          = "api"          // serves the HTTP API
	RoleOrchestrator = "orchestrator" // may act as the orchestrator
)

// Roles lists every role, in the order a configuration names them.
func Roles() []string {
	return []string{RoleHost, RoleEffects, RoleTimers, RoleAPI, RoleOrchestrator}
}

// Capability prefixes. A capability is "<prefix>:<what>", with a version
// after "@" where the thing it names has one.
const (
	capRole     = "role:"
	capWorld    = "world:"
	capWorkflow = "workflow:"
	capEffect   = "effect:"
)

// RoleCapability is the capability of a process that runs role.
func RoleCapability(role string) string { return capRole + role }

// WorldCapability is the capability of a process that can run the worlds
// of universe at a kernel version (world.Kernel.Version).
func WorldCapability(universe string, version uint64) string {
	return capWorld + universe + "@" + strconv.FormatUint(version, 10)
}

// WorkflowCapability is the capability of a process that can run the runs
// of workflow name at a plan version (workflow.Workflow.Version).
func WorkflowCapability(name string, version uint64) string {
	return capWorkflow + name + "@" + strconv.FormatUint(version, 10)
}

// EffectCapability is the capability of a process whose adapter pool
// executes effects of kind.
func EffectCapability(kind string) string { return capEffect + kind }

// CapabilitySet is what a process can do, for Capabilities.
type CapabilitySet struct {
	Roles     []string          // the roles it runs (Roles' names)
	Kernels   Kernels           // the worlds it can run: world:<universe>@<version>
	Workflows map[string]uint64 // workflow name → plan version it runs
	// EffectKinds are the kinds its adapter pool executes (only listed
	// when it runs RoleEffects).
	EffectKinds []string
}

// Capabilities is the list a process advertises (store.Advertise): its
// roles, then the world types and workflow versions it carries and the
// effect kinds it executes, sorted and without duplicates. The worlds and
// workflows are listed whatever the roles, since they say what the binary
// carries; only a RoleHost process is given worlds to run.
func Capabilities(s CapabilitySet) []string {
	var out []string
	for _, r := range s.Roles {
		out = append(out, RoleCapability(r))
	}
	for u, k := range s.Kernels {
		// Every version the binary carries (world.Versions): a world is
		// placed only where the version it is on runs.
		for _, v := range world.KernelVersions(k) {
			out = append(out, WorldCapability(u, v))
		}
	}
	for name, v := range s.Workflows {
		out = append(out, WorkflowCapability(name, v))
	}
	for _, k := range s.EffectKinds {
		out = append(out, EffectCapability(k))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Runs reports whether the worker runs role: it advertised the role, or it
// advertised nothing (a binary older than worker classes, which runs
// every part).
func Runs(info store.WorkerInfo, role string) bool {
	return store.HasCapability(info, RoleCapability(role))
}

// Eligible reports whether a world of universe, at kernel version (0: any
// version), may be placed on the worker info describes, by what it
// carries: it runs RoleHost and advertises world:<universe>@<version> (any
// version of the universe when version is 0). A worker that advertised
// nothing (an older binary) carries everything. Liveness, draining and
// capacity are the caller's to judge.
func Eligible(info store.WorkerInfo, universe string, version uint64) bool {
	if len(info.Capabilities) == 0 {
		return true
	}
	if !Runs(info, RoleHost) {
		return false
	}
	if version != 0 {
		return store.HasCapability(info, WorldCapability(universe, version))
	}
	prefix := capWorld + universe + "@"
	i, _ := slices.BinarySearch(info.Capabilities, prefix)
	return i < len(info.Capabilities) && strings.HasPrefix(info.Capabilities[i], prefix)
}

// limited reports whether the orchestrator holds the worker to its
// declared Capacity: a worker that advertises capabilities declared it as
// a bound; an older binary's figure was never kept, and it announced the
// host's default of 1<<20 anyway.
func limited(info store.WorkerInfo) bool { return len(info.Capabilities) > 0 }
