package archtest

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/orrery-run/orrery"

// TestHouseRules checks every rule on who may import or call what, on one
// load of the module's dependency graph. Each subtest is one rule.
func TestHouseRules(t *testing.T) {
	g := load(t)
	t.Run("LayersImportOnlyLayersBelow", func(t *testing.T) { checkLayers(t, g) })
	t.Run("NothingImportsCmd", func(t *testing.T) { checkNothingImportsCmd(t, g) })
	t.Run("KernelIsPure", func(t *testing.T) { checkKernelIsPure(t, g) })
	t.Run("StoreNeverReachesWorld", func(t *testing.T) { checkStoreNeverReachesWorld(t, g) })
	t.Run("NoAmbientTimeOrRandomness", func(t *testing.T) { checkSeam(t, g) })
}

// ---- the graph -------------------------------------------------------------

// pkg is what `go list -json` says of a package.
type pkg struct {
	ImportPath     string
	Name           string
	Dir            string
	Standard       bool
	GoFiles        []string
	CgoFiles       []string
	IgnoredGoFiles []string // other platforms' and build tags' files: the rules hold for them too
	TestGoFiles    []string
	XTestGoFiles   []string
	Imports        []string
	TestImports    []string
	XTestImports   []string
	Deps           []string // the whole closure, sorted
}

type graph map[string]*pkg

// load lists the module's packages and everything they depend on, the
// standard library and other modules included.
func load(t *testing.T) graph {
	t.Helper()
	gomod := strings.TrimSpace(string(run(t, ".", "go", "env", "GOMOD")))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatalf("not inside the module (go env GOMOD = %q)", gomod)
	}
	out := run(t, filepath.Dir(gomod), "go", "list", "-deps", "-json", "./...")
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		p := new(pkg)
		if err := dec.Decode(p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		g[p.ImportPath] = p
	}
	for _, must := range []string{module, module + "/world", module + "/store", module + "/actor"} {
		if g[must] == nil {
			t.Fatalf("go list did not list %s: wrong module?", must)
		}
	}
	return g
}

func run(t *testing.T, dir string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

func ours(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// rel is a module package's path inside the module ("" for the root).
func rel(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

// ours lists the module's packages, sorted.
func (g graph) ours() []*pkg {
	var out []*pkg
	for _, p := range g {
		if ours(p.ImportPath) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *pkg) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	return out
}

// chain is a shortest import path from one package to another, for
// messages: "world → event → fmt".
func (g graph) chain(from, to string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var path []string
			for p := to; p != ""; p = prev[p] {
				path = append(path, short(p))
			}
			slices.Reverse(path)
			return strings.Join(path, " → ")
		}
		if p := g[cur]; p != nil {
			for _, imp := range p.Imports {
				if _, seen := prev[imp]; !seen {
					prev[imp] = cur
					queue = append(queue, imp)
				}
			}
		}
	}
	return short(from) + " → … → " + short(to)
}

func short(path string) string {
	if ours(path) {
		if r := rel(path); r != "" {
			return r
		}
		return "orrery"
	}
	return path
}

// ---- layers ----------------------------------------------------------------

type layer struct {
	name     string
	prefixes []string // module-relative; "" is the root package alone
}

// layerTable is the module's layers, top to bottom. A package may import
// its own layer and the layers below it. A package main is a binary,
// above every layer (nothing can import it).
func layerTable() []layer {
	return []layer{
		// The shared test rig and test worlds: above every layer they put
		// together, and imported by tests alone (internal/testrig's
		// TestOnlyTestsImportTheRig).
		{"test rigs", []string{"internal/testrig", "internal/testworlds"}},
		// The public test kit: a node in virtual time for users' tests,
		// like a small orrery.App; only binaries and the rigs are above.
		{"test kit", []string{"orrerytest"}},
		{"orrery", []string{""}},
		{"command line", []string{"internal/cli", "internal/demo"}},
		{"examples", []string{"examples"}},
		{"api", []string{"api"}},
		{"web", []string{"web"}},
		{"plane", []string{"plane"}},
		{"workflow", []string{"workflow"}},
		// Lease timing, shared by plane's host and workflow's worker.
		{"leasing", []string{"internal/leasing"}},
		// The adapter contract: what an application's adapter implements.
		{"effect", []string{"effect"}},
		{"world", []string{"world"}},
		{"store", []string{"store"}},
		// The shared vocabulary of intents, receipts, inbox kinds and claims.
		{"vocab", []string{"vocab"}},
		{"event", []string{"event"}},
		{"lab", []string{"lab"}},
		{"registry", []string{"registry"}},
		{"supervisor", []string{"supervisor"}},
		{"actor", []string{"actor"}},
		{"handlers", []string{"handlers"}},
		// Imported by tests only.
		{"test support", []string{"internal/leaktest", "internal/archtest", "internal/tcpproxy"}},
	}
}

// placement is a module package's layer: its rank (higher is above) and
// name, by the longest prefix that holds it. ok is false for a package
// outside the module or in no layer.
func (g graph) placement(path string) (rank int, name string, ok bool) {
	if !ours(path) {
		return 0, "", false
	}
	if p := g[path]; p != nil && p.Name == "main" {
		return 1 << 20, "binaries", true
	}
	r := rel(path)
	table := layerTable()
	best, bestLen := -1, -1
	for i, l := range table {
		for _, pre := range l.prefixes {
			if (r == pre || pre != "" && strings.HasPrefix(r, pre+"/")) && len(pre) > bestLen {
				best, bestLen = i, len(pre)
			}
		}
	}
	if best < 0 {
		return 0, "", false
	}
	return len(table) - best, table[best].name, true
}

func checkLayers(t *testing.T, g graph) {
	for _, p := range g.ours() {
		rp, lp, ok := g.placement(p.ImportPath)
		if !ok {
			t.Errorf("%s is in no layer: give it its place in layerTable (internal/archtest)", short(p.ImportPath))
			continue
		}
		for _, imp := range p.Imports {
			if rq, lq, ok := g.placement(imp); ok && rq > rp {
				t.Errorf("%s (layer %s) imports %s (layer %s, above it)", short(p.ImportPath), lp, short(imp), lq)
			}
		}
	}
}

func checkNothingImportsCmd(t *testing.T, g graph) {
	for _, p := range g.ours() {
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if r := rel(imp); ours(imp) && (r == "cmd" || strings.HasPrefix(r, "cmd/")) {
				t.Errorf("%s imports %s: nothing imports cmd/", short(p.ImportPath), short(imp))
			}
		}
	}
}

// ---- the kernel's closure --------------------------------------------------

// neverInKernel reports the standard packages that must not be anywhere in
// world's closure, not even behind another standard package, and why.
// Each is a way to do I/O, read a clock, draw entropy or start goroutines
// that the kernel has no use for:
//   - context: deadlines read the clock, and AfterFunc starts goroutines;
//     the kernel never blocks, so it has nothing to cancel;
//   - log, log/...: writing is output, and a step's logs are data
//     (StepResult.Logs);
//   - net, net/..., database/..., os/... (os/exec, os/signal, os/user):
//     the network, databases, processes, signals, the user database;
//   - crypto/rand: the machine's entropy (a step's randomness is seeded by
//     world and height);
//   - runtime/debug, runtime/pprof, runtime/trace, plugin: the process's
//     own controls, profiles written out, code loaded at run time;
//   - testing, testing/...: a test framework in the kernel's binary;
//   - io/ioutil, time/tzdata: file reading, and a zone database to read
//     the local time with.
func neverInKernel(path string) (why string, banned bool) {
	switch path {
	case "context":
		return "contexts read the clock and start goroutines", true
	case "crypto/rand":
		return "the machine's entropy", true
	case "runtime/debug", "runtime/pprof", "runtime/trace", "plugin":
		return "the process's own controls", true
	case "io/ioutil", "time/tzdata":
		return "file reading, or a zone database", true
	}
	for pre, why := range map[string]string{
		"log":      "logging is output; a step's logs are data",
		"net":      "the network",
		"database": "databases",
		"os/":      "processes, signals and the user database",
		"testing":  "no test framework in the kernel",
	} {
		if path == pre || strings.HasPrefix(path, strings.TrimSuffix(pre, "/")+"/") {
			return why, true
		}
	}
	return "", false
}

// neverImportedInKernel reports the standard packages no package of
// world's closure outside the standard library may import itself. They
// are in the closure all the same, because standard packages the kernel
// rightly uses import them for paths it never takes: fmt imports os for
// Print (stdout), time imports syscall to load zone files, crypto's FIPS
// module reads the environment, math/big imports math/rand. The kernel's
// own code calls none of those paths (checkSource bans the calls), and
// may not import the packages that would open others.
func neverImportedInKernel(path string) (why string, banned bool) {
	if why, banned := neverInKernel(path); banned {
		return why, true
	}
	switch path {
	case "os", "syscall", "io/fs":
		return "files, processes and system calls", true
	case "unsafe":
		return "it bypasses every rule the compiler keeps", true
	case "math/rand":
		return "an ambient random source (a step's randomness is seeded by world and height)", true
	}
	return "", false
}

// kernelImportExceptions are imports neverImportedInKernel bans that a
// package outside this module makes for a path the kernel never takes;
// each says why it is harmless. An exception that no longer applies fails
// the test, so the list only shrinks.
func kernelImportExceptions() map[[2]string]string {
	return map[[2]string]string{
		{"github.com/fxamacker/cbor/v2", "math/rand"}: "only its SortFastShuffle option draws from it, " +
			"and package event's modes sort canonically",
	}
}

// checkKernelIsPure: world is a pure function of (state, input). Nothing
// in its whole dependency closure can do I/O, read a clock, draw ambient
// randomness or start a goroutine, and it reaches none of the module's
// layers that do (store, lab, registry, supervisor, actor, and everything
// above world).
func checkKernelIsPure(t *testing.T, g graph) {
	root := module + "/world"
	closure := append([]string{root}, g[root].Deps...)
	rw, _, _ := g.placement(root)
	exceptions := kernelImportExceptions()
	used := map[[2]string]bool{}
	for _, path := range closure {
		p := g[path]
		if ours(path) {
			rp, lp, ok := g.placement(path)
			switch {
			case !ok:
				t.Errorf("world reaches %s, which is in no layer (%s)", short(path), g.chain(root, path))
			case rp >= rw && path != root, slices.Contains([]string{"store", "lab", "registry", "supervisor", "actor"}, lp):
				t.Errorf("world reaches %s (layer %s): %s", short(path), lp, g.chain(root, path))
			}
		}
		if why, banned := neverInKernel(path); banned {
			t.Errorf("world's closure holds %s (%s): %s", path, why, g.chain(root, path))
		}
		if p == nil || p.Standard {
			continue
		}
		var allowed []string
		for _, imp := range p.Imports {
			why, banned := neverImportedInKernel(imp)
			if !banned {
				continue
			}
			if _, ok := exceptions[[2]string{path, imp}]; ok {
				used[[2]string{path, imp}] = true
				allowed = append(allowed, imp)
				continue
			}
			t.Errorf("%s, in world's closure (%s), imports %s: %s", short(path), g.chain(root, path), imp, why)
		}
		checkSource(t, p, kernelFiles(p), kernelCalls(allowed))
	}
	for _, k := range slices.SortedFunc(maps.Keys(exceptions), func(a, b [2]string) int {
		return strings.Compare(a[0]+" "+a[1], b[0]+" "+b[1])
	}) {
		if !used[k] {
			t.Errorf("the exception for %s importing %s no longer applies: remove it", k[0], k[1])
		}
	}
}

func kernelFiles(p *pkg) []string { return slices.Concat(p.GoFiles, p.CgoFiles, p.IgnoredGoFiles) }

// kernelCalls bans, in the kernel's closure, the calls that read the
// clock, sleep or arm timers; the fmt functions that use stdin and stdout;
// loading a time zone (a file); and math/rand/v2's top-level functions,
// which draw from the runtime's ambient source (a generator the caller
// seeds, rand.New(rand.NewChaCha8(seed)), is what the kernel uses). The
// imports in allowed are exceptions whose calls are not checked.
func kernelCalls(allowed []string) callRules {
	return callRules{
		banned: map[string]map[string]string{
			"time": {"Now": clock, "Since": clock, "Until": clock, "Sleep": clock, "After": clock,
				"AfterFunc": clock, "Tick": clock, "NewTimer": clock, "NewTicker": clock,
				"LoadLocation": "reads the zone database"},
			"fmt": {"Print": "writes to stdout", "Printf": "writes to stdout", "Println": "writes to stdout",
				"Scan": "reads stdin", "Scanf": "reads stdin", "Scanln": "reads stdin"},
		},
		onlyThese: map[string]map[string]bool{
			"math/rand/v2": {"New": true, "NewPCG": true, "NewChaCha8": true, "NewZipf": true,
				"Rand": true, "Source": true, "PCG": true, "ChaCha8": true, "Zipf": true},
		},
		noGo:    "the kernel starts no goroutine",
		skipped: allowed,
	}
}

const clock = "reads the machine's clock or arms its timers"

// ---- store never reaches world ---------------------------------------------

// checkStoreNeverReachesWorld: the store keeps bytes and metadata and
// knows nothing of world semantics, through no chain of imports.
func checkStoreNeverReachesWorld(t *testing.T, g graph) {
	rw, _, _ := g.placement(module + "/world")
	for _, p := range g.ours() {
		if _, lp, _ := g.placement(p.ImportPath); lp != "store" {
			continue
		}
		for _, dep := range p.Deps {
			if r, ld, ok := g.placement(dep); ok && r >= rw {
				t.Errorf("%s reaches %s (layer %s): %s", short(p.ImportPath), short(dep), ld, g.chain(p.ImportPath, dep))
			}
		}
	}
}

// ---- the executor seam -----------------------------------------------------

// checkSeam: actor, supervisor and registry never read the machine's
// clock, sleep, arm timers, draw randomness or start goroutines
// themselves. They go through actor.Executor, so that the lab can make
// them deterministic. actor/executor_real.go is the production side of
// the seam and the only exception. registry's tests keep the rule too.
func checkSeam(t *testing.T, g graph) {
	checked := 0
	for _, p := range g.ours() {
		_, l, _ := g.placement(p.ImportPath)
		if l != "actor" && l != "supervisor" && l != "registry" {
			continue
		}
		var files []string
		for _, f := range slices.Concat(p.GoFiles, p.CgoFiles, p.IgnoredGoFiles) {
			if !(rel(p.ImportPath) == "actor" && f == "executor_real.go") {
				files = append(files, f)
			}
		}
		checked += len(files)
		checkSource(t, p, files, seamCalls(false))
		if l == "registry" {
			tests := slices.Concat(p.TestGoFiles, p.XTestGoFiles)
			checked += len(tests)
			checkSource(t, p, tests, seamCalls(true))
		}
	}
	if checked == 0 {
		t.Fatal("no source of actor, supervisor or registry checked")
	}
}

// seamCalls are the seam's bans; tests (registry's) keep the clock and
// randomness ones, and may start goroutines and use context's timeouts.
func seamCalls(tests bool) callRules {
	const seam = "go through the actor.Executor seam"
	r := callRules{
		banned: map[string]map[string]string{
			"time": {"Now": seam, "Since": seam, "Until": seam, "Sleep": seam, "After": seam,
				"AfterFunc": seam, "Tick": seam, "NewTimer": seam, "NewTicker": seam},
		},
		bannedImports: map[string]string{
			"math/rand":    "randomness comes from Executor.Uint64",
			"math/rand/v2": "randomness comes from Executor.Uint64",
		},
	}
	if !tests {
		r.banned["context"] = map[string]string{"WithTimeout": "use actor.WithTimeout", "WithDeadline": "use actor.WithDeadline",
			"WithTimeoutCause": "use actor.WithTimeout", "WithDeadlineCause": "use actor.WithDeadline"}
		r.noGo = "start goroutines with Executor.Go"
	}
	return r
}

// ---- source rules ----------------------------------------------------------

type callRules struct {
	banned        map[string]map[string]string // import path → its functions banned, and why
	onlyThese     map[string]map[string]bool   // import path → the only names that may be used
	bannedImports map[string]string
	noGo          string   // why a go statement is refused; "" allows them
	skipped       []string // imports whose uses are not checked
}

// checkSource parses files of p and reports what rules bans. Uses are
// found by the name the file imports a package under, so an import
// renamed to dodge the rule is caught too; a dot import of a checked
// package is refused, since its uses could not be told apart.
func checkSource(t *testing.T, p *pkg, files []string, rules callRules) {
	t.Helper()
	fset := token.NewFileSet()
	for _, name := range files {
		path := filepath.Join(p.Dir, name)
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("parse %s: %v", path, err)
			continue
		}
		where := func(pos token.Pos) string {
			pp := fset.Position(pos)
			return short(p.ImportPath) + "/" + name + ":" + strconv.Itoa(pp.Line)
		}
		names := map[string]string{} // the name a checked package goes by in this file → its path
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			if why, ok := rules.bannedImports[ip]; ok {
				t.Errorf("%s imports %s: %s", where(imp.Pos()), ip, why)
			}
			if rules.banned[ip] == nil && rules.onlyThese[ip] == nil || slices.Contains(rules.skipped, ip) {
				continue
			}
			local := ip[strings.LastIndex(ip, "/")+1:]
			if ip == "math/rand/v2" {
				local = "rand"
			}
			if imp.Name != nil {
				local = imp.Name.Name
			}
			if local == "." {
				t.Errorf("%s dot-imports %s", where(imp.Pos()), ip)
			}
			names[local] = ip
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				if rules.noGo != "" {
					t.Errorf("%s: go statement: %s", where(n.Pos()), rules.noGo)
				}
			case *ast.SelectorExpr:
				x, ok := n.X.(*ast.Ident)
				if !ok {
					return true
				}
				ip, ok := names[x.Name]
				if !ok {
					return true
				}
				if why, bad := rules.banned[ip][n.Sel.Name]; bad {
					t.Errorf("%s: %s.%s: %s", where(n.Pos()), ip, n.Sel.Name, why)
				}
				if only := rules.onlyThese[ip]; only != nil && !only[n.Sel.Name] {
					t.Errorf("%s: %s.%s draws from an ambient source; seed a generator", where(n.Pos()), ip, n.Sel.Name)
				}
			}
			return true
		})
	}
}
