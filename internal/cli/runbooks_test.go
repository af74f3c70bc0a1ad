package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/internal/testworlds"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// pendingRunbookCommands is how many runbook commands sit in ```sh pending
// blocks: commands of features other branches are building. Whoever turns
// a pending block into a ```sh block (the feature merged) lowers it, and
// adds the command's check to TestRunbooks.
const pendingRunbookCommands = 0

// runbookDoc is the operator's guide, whose "Runbooks" section the test
// runs.
const runbookDoc = "../../docs/operations.md"

// runbookCommand is one `orrery` line of a runbook's command block.
type runbookCommand struct {
	section string // the runbook's ### heading
	line    string // as written, placeholders included
	pending bool   // in a ```sh pending block
}

// runbookText is the "## Runbooks" section of the guide: its command
// lines, and its prose (where metrics are named).
type runbookText struct {
	commands []runbookCommand
	prose    string
}

// parseRunbooks reads the runbooks of the guide doc. A command line
// anywhere but in a ```sh block, or a line in one that is not a command,
// is an error: nothing a runbook tells an operator to run escapes the
// test.
func parseRunbooks(doc string) (runbookText, []error) {
	var rt runbookText
	var errs []error
	var in, inBlock, pending, shell bool
	section := ""
	var prose strings.Builder
	sc := bufio.NewScanner(strings.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !inBlock && strings.HasPrefix(line, "## ") {
			in = line == "## Runbooks"
			continue
		}
		if !in {
			continue
		}
		if !inBlock && strings.HasPrefix(line, "### ") {
			section = strings.TrimPrefix(line, "### ")
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			if inBlock {
				inBlock = false
				continue
			}
			inBlock = true
			info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
			shell = len(info) > 0 && info[0] == "sh"
			pending = shell && len(info) == 2 && info[1] == "pending"
			if shell && len(info) > 2 || shell && len(info) == 2 && !pending {
				errs = append(errs, fmt.Errorf("line %d: a runbook block is ```sh or ```sh pending, not %q", n, trimmed))
			}
			continue
		}
		if !inBlock {
			prose.WriteString(line + "\n")
			continue
		}
		switch {
		case trimmed == "":
		case !shell && strings.HasPrefix(trimmed, "orrery "):
			errs = append(errs, fmt.Errorf("line %d: a runbook command outside a ```sh block escapes the test: %q", n, trimmed))
		case !shell:
		case section == "":
			errs = append(errs, fmt.Errorf("line %d: a runbook command before the first runbook's heading: %q", n, trimmed))
		case !strings.HasPrefix(trimmed, "orrery "):
			errs = append(errs, fmt.Errorf("line %d: a runbook's ```sh block holds only orrery commands, not %q", n, trimmed))
		default:
			rt.commands = append(rt.commands, runbookCommand{section: section, line: trimmed, pending: pending})
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	if inBlock {
		errs = append(errs, errors.New("a runbook's block is not closed"))
	}
	rt.prose = prose.String()
	return rt, errs
}

// readRunbooks parses the guide's runbooks, failing t on any error.
func readRunbooks(t *testing.T) runbookText {
	t.Helper()
	b, err := os.ReadFile(runbookDoc)
	if err != nil {
		t.Fatal(err)
	}
	rt, errs := parseRunbooks(string(b))
	for _, err := range errs {
		t.Errorf("%s: %v", runbookDoc, err)
	}
	if len(rt.commands) == 0 {
		t.Fatalf("%s: no runbook command found", runbookDoc)
	}
	return rt
}

// TestRunbookParserLetsNoCommandEscape shows the parser refuses what
// would let a runbook command go unrun, and tells pending commands apart.
func TestRunbookParserLetsNoCommandEscape(t *testing.T) {
	doc := "# Guide\n\n## Other\n\n```sh\norrery not-a-runbook\n```\n\n## Runbooks\n\n### One\n\n" +
		"Watch `orrery_commits_total`.\n\n```sh\norrery world show <world>\n```\n\n```sh pending\norrery queue list\n```\n\n" +
		"```bash\norrery workers list\n```\n\n```sh\nkill -9 1234\n```\n\n```sh later\norrery lease list\n```\n\n## After\n\n```sh\norrery lab\n```\n"
	rt, errs := parseRunbooks(doc)
	want := []runbookCommand{
		{section: "One", line: "orrery world show <world>"},
		{section: "One", line: "orrery queue list", pending: true},
		{section: "One", line: "orrery lease list"},
	}
	if !slices.Equal(rt.commands, want) {
		t.Errorf("commands %+v, want %+v", rt.commands, want)
	}
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	for _, w := range []string{"outside a ```sh block escapes the test: \"orrery workers list\"", "only orrery commands, not \"kill -9 1234\"", "```sh or ```sh pending, not \"```sh later\""} {
		if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, w) }) {
			t.Errorf("no error saying %s in %q", w, msgs)
		}
	}
	if len(errs) != 3 {
		t.Errorf("%d errors, want 3: %q", len(errs), msgs)
	}
	if !strings.Contains(rt.prose, "orrery_commits_total") || strings.Contains(rt.prose, "not-a-runbook") {
		t.Errorf("the runbooks' prose is not the section's: %q", rt.prose)
	}
	if _, errs := parseRunbooks("## Runbooks\n\n### One\n\n```sh\norrery lease list\n"); len(errs) != 1 {
		t.Errorf("an unclosed block: %v, want one error", errs)
	}
	if _, err := runbookWords(`orrery effects hold x --reason "a; b" '{"s":1}'`); err != nil {
		t.Errorf("quoted metacharacters refused: %v", err)
	}
	if _, err := runbookWords(`orrery effects list | grep held`); err == nil {
		t.Error("a pipe was taken for a word")
	}
}

// runbookWords splits a command line as sh does for the quoting the
// runbooks use: words separated by blanks, '…' and "…" quoting (no
// escapes, no expansion).
func runbookWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune("$`\\|;&<>", r):
			return nil, fmt.Errorf("%q: only plain words and quotes are supported, not %q", line, r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("%q: unterminated quote", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// placeholder is a runbook's <word>.
var placeholder = regexp.MustCompile(`<[a-z][a-z-]*>`)

// metricMention is a metric a runbook names, with the labels it names.
var metricMention = regexp.MustCompile(`\borrery_[a-z0-9_]+(\{[^}]*\})?`)

// runbookCheck is what the test asserts of one runbook command.
type runbookCheck struct {
	// before runs ahead of the command: what an operator does between two
	// commands that is not a command (restart a process).
	before func()
	// eventually re-runs the command until check passes (a read whose
	// answer follows an asynchronous step the runbook says to wait for).
	eventually bool
	check      func(out string) error
}

// runbook is a runbook's scenario: its placeholders and the check of
// each of its commands, keyed by the line as the guide writes it.
type runbook struct {
	vars   map[string]string
	checks map[string]runbookCheck
}

// TestRunbooks runs every command of docs/operations.md's runbooks through
// the real command line against served nodes in the state each runbook is
// for, and checks each prints what the runbook says; every metric a
// runbook names must be on the nodes' /metrics.
func TestRunbooks(t *testing.T) {
	rt := readRunbooks(t)
	var pending []string
	for _, c := range rt.commands {
		if c.pending {
			pending = append(pending, c.section+": "+c.line)
		}
	}
	for _, p := range pending {
		t.Logf("pending (not run until its feature is merged): %s", p)
	}
	if len(pending) != pendingRunbookCommands {
		t.Errorf("%d runbook commands are pending, pendingRunbookCommands says %d: a pending block turned ```sh (or a new one) must change it", len(pending), pendingRunbookCommands)
	}

	checkLogLines(t, rt.prose)

	sc := newRunbookScenario(t)
	// The metrics first: the upgrade restarts node-a, whose counters
	// start again from nothing.
	sc.checkMetrics(rt.prose)
	books := sc.runbooks()
	seen := map[string]map[string]bool{}
	for _, c := range rt.commands {
		if c.pending {
			continue
		}
		b, ok := books[c.section]
		if !ok {
			t.Fatalf("runbook %q has no scenario in TestRunbooks", c.section)
		}
		chk, ok := b.checks[c.line]
		if !ok {
			t.Fatalf("runbook %q: no check for %q: every runbook command must be run by TestRunbooks", c.section, c.line)
		}
		if seen[c.section] == nil {
			seen[c.section] = map[string]bool{}
		}
		seen[c.section][c.line] = true
		line := placeholder.ReplaceAllStringFunc(c.line, func(p string) string {
			v, ok := b.vars[p]
			if !ok {
				t.Fatalf("runbook %q: %q: no value for %s", c.section, c.line, p)
			}
			return v
		})
		words, err := runbookWords(line)
		if err != nil {
			t.Fatal(err)
		}
		if chk.before != nil {
			chk.before()
		}
		sc.runChecked(c.section, line, words[1:], chk)
	}
	for name, b := range books {
		for line := range b.checks {
			if !seen[name][line] {
				t.Errorf("runbook %q: TestRunbooks checks %q, which the guide no longer has", name, line)
			}
		}
	}
}

// runChecked runs one command on the first node and applies its check.
func (sc *runbookScenario) runChecked(section, line string, args []string, chk runbookCheck) {
	t := sc.t
	t.Helper()
	for {
		r := sc.a.cli(args...)
		var err error
		if r.code != cli.ExitOK {
			err = fmt.Errorf("exit %d", r.code)
		} else {
			err = chk.check(r.out)
		}
		if err == nil {
			t.Logf("%s: %s: ok\n%s", section, line, r.out)
			return
		}
		if !chk.eventually {
			t.Fatalf("%s: %s: %v\n%s", section, line, err, r)
		}
		select {
		case <-sc.ctx.Done():
			t.Fatalf("%s: %s: %v (still, when the test's time ran out)\n%s", section, line, err, r)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runbookScenario is the cluster the runbooks run against: nodes serving
// one SQLite file, which was prepared first so that it holds every
// incident the runbooks are for. node-a serves alone until the upgrade,
// which drains it onto node-c: one SQLite file's nodes hear of each
// other's input only at a rescan.
type runbookScenario struct {
	t    *testing.T
	ctx  context.Context
	db   string
	app  cli.App
	a, c *served // node-a, whose API the commands use, and node-c (nil until the upgrade)

	// The incidents.
	deadEpoch     uint64 // bob's lease epoch on the dead worker
	divergeHeight uint64 // dora's last height that replays
	stuck, failed string // hal's effect stuck in flight, fay's that failed
}

const (
	nodeA, nodeC   = "node-a", "node-c"
	deadNode       = "node-b"   // a worker that died holding bob
	oldNode        = "node-old" // the node of the binary that wrote dora's journal
	runbookQuery   = "ledger/Balance"
	runbookLease   = "2s"
	runbookStopMax = "2s"       // a stuck effect's execution never ends: a stop waits this long for it
	runbookQueue   = "payouts"  // a named queue of workflow runs, one slot
	tallyUniverse  = "rb/tally" // a world type today's binary carries in two versions
)

// The tally's inputs, and its state at version 1 and 2 (the count
// renamed, and a mark that the migration ran).
type (
	tallyAdd struct{ By int64 }
	tallyGet struct{}
	tallyV1  struct{ N int64 }
	tallyV2  struct {
		Total    int64
		Migrated bool
	}
)

func tallyV1Def() *world.Def[tallyV1] {
	d := world.New[tallyV1](tallyUniverse, 1)
	world.On(d, func(c *world.Ctx, s *tallyV1, a tallyAdd) error {
		s.N += a.By
		c.Reply(s.N)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tallyV1, _ tallyGet) error {
		c.Reply(s.N)
		return nil
	})
	return d
}

func tallyV2Def() *world.Def[tallyV2] {
	d := world.New[tallyV2](tallyUniverse, 2)
	world.On(d, func(c *world.Ctx, s *tallyV2, a tallyAdd) error {
		s.Total += a.By
		c.Reply(s.Total)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tallyV2, _ tallyGet) error {
		c.Reply(s.Total)
		return nil
	})
	return d
}

// tallyVersions is today's binary's tally: v1 and v2, and the migration.
func tallyVersions() world.Kernel {
	return world.Versions(world.Upgrade(tallyV1Def(), tallyV2Def(), func(s tallyV1) (tallyV2, error) {
		return tallyV2{Total: s.N, Migrated: true}, nil
	}))
}

// doubling is the account definition an older binary had: its deposit
// counted twice. A journal it wrote does not replay under ledger's.
func doubling() plane.Kernels {
	d := world.New[ledger.Account](ledger.UniverseAccount, 1)
	world.On(d, func(c *world.Ctx, s *ledger.Account, m ledger.Deposit) error {
		s.Balance += 2 * m.Amount
		c.Reply(s.Balance)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *ledger.Account, _ ledger.Balance) error {
		c.Reply(s.Balance)
		return nil
	})
	return plane.Kernels{ledger.UniverseAccount: d.Kernel()}
}

func newRunbookScenario(t *testing.T) *runbookScenario {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	sc := &runbookScenario{t: t, ctx: ctx, db: filepath.Join(t.TempDir(), "orrery.db")}
	serveArgs := sc.serveArgs()

	// An older binary writes dora's journal (and creates bob), and stops.
	// It snapshots rarely, so that a restore replays the whole journal.
	oldKernels := doubling()
	oldKernels[tallyUniverse] = tallyV1Def().Kernel()
	old := startServeApp(t, cli.App{Kernels: oldKernels}, nil, oldNode, append(serveArgs, "--snapshot-every", "1000000")...)
	// It also ran tallies at version 1 (a world created by today's binary
	// starts on the newest version), which "Upgrading" moves to version 2.
	for _, id := range []string{"tally-1", "tally-2"} {
		old.ok("world", "create", id, "--universe", tallyUniverse)
		old.ok("world", "call", id, typeName(t, tallyAdd{}), `{"By":3}`)
	}
	old.ok("world", "create", "dora", "--universe", ledger.UniverseAccount)
	old.ok("world", "create", "bob", "--universe", ledger.UniverseAccount)
	// Its first step, a read, replays under today's definition too.
	if out := old.ok("world", "call", "dora", runbookQuery); strings.TrimSpace(out) != "0" {
		t.Fatalf("the older binary's balance: %q", out)
	}
	if out := old.ok("world", "call", "dora", "ledger/Deposit", `{"Amount":10}`); strings.TrimSpace(out) != "20" {
		t.Fatalf("the older binary's deposit: %q", out)
	}
	var dora api.WorldView
	if err := json.Unmarshal([]byte(old.ok("world", "show", "dora", "-o", "json")), &dora); err != nil {
		t.Fatal(err)
	}
	sc.divergeHeight = dora.Head - 1
	if code := old.stop(); code != cli.ExitOK {
		t.Fatalf("the older binary's serve exited %d\n%s", code, old.err.String())
	}

	// node-b held bob an hour ago, and died: its heartbeat and lease are
	// the store's as of then.
	past, err := sqlite.Open(ctx, sc.db, sqlite.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := past.Heartbeat(ctx, deadNode, 0); err != nil {
		t.Fatal(err)
	}
	if err := past.Assign(ctx, "bob", store.Assignment{DesiredWorker: deadNode, Reason: "placed before it died"}, nil); err != nil {
		t.Fatal(err)
	}
	l, err := past.Acquire(ctx, "bob", deadNode, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sc.deadEpoch = l.Epoch
	if err := past.Close(); err != nil {
		t.Fatal(err)
	}

	// Today's binary: ledger, and the test counter whose echo effect no
	// node runs an adapter for.
	wfs, err := ledger.Workflows()
	if err != nil {
		t.Fatal(err)
	}
	kernels := ledger.Kernels()
	kernels[testworlds.CounterName] = testworlds.CounterDef().Kernel()
	kernels[tallyUniverse] = tallyVersions()
	// One slot: the first payout started on it holds it (waiting for its
	// approval), and the next waits.
	if err := wfs.AddQueues(workflow.Queue{Name: runbookQueue, Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	sc.app = cli.App{Kernels: kernels, Workflows: wfs, Adapters: []adapter.Registration{adapter.Register(auditAdapter{}, adapter.NoRetry())}}
	sc.a = sc.serve(nodeA)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node-a's log:\n%s", sc.a.err.String())
			if sc.c != nil {
				t.Logf("node-c's log:\n%s", sc.c.err.String())
			}
		}
	})
	sc.seed()
	return sc
}

// serveArgs are the flags of every node of the scenario.
func (sc *runbookScenario) serveArgs() []string {
	return []string{"--store", sc.db, "--lease-ttl", runbookLease, "--stop-timeout", runbookStopMax}
}

// serve starts a node of today's binary.
func (sc *runbookScenario) serve(worker string) *served {
	sc.t.Helper()
	return startServeApp(sc.t, sc.app, nil, worker, sc.serveArgs()...)
}

// seed makes the worlds, effects, timers and runs the runbooks act on.
func (sc *runbookScenario) seed() {
	a := sc.a
	for _, w := range []struct{ id, url string }{{"alice", ""}, {"wendy", ""}, {"hal", auditHang}, {"fay", auditFail}, {"ivy", auditHang}} {
		a.ok("world", "create", w.id, "--universe", ledger.UniverseAccount)
		a.ok("world", "call", w.id, "ledger/Open", `{"Owner":"`+w.id+`","AuditURL":"`+w.url+`","AuditAbove":10}`)
		a.ok("world", "call", w.id, "ledger/Deposit", `{"Amount":100}`)
	}
	// dora's restore, for an input, replays a journal today's definition
	// does not reproduce.
	a.ok("world", "send", "dora", "ledger/Deposit", `{"Amount":1}`, "--key", "after-the-upgrade")
	// wendy is paused with a deposit waiting in its inbox.
	a.ok("world", "pause", "wendy", "--reason", "incident 42")
	a.ok("world", "send", "wendy", "ledger/Deposit", `{"Amount":7}`, "--key", "waiting-1")
	// hal's and ivy's audits hang in flight; fay's fails.
	for _, id := range []string{"hal", "fay", "ivy"} {
		a.ok("world", "call", id, "ledger/Withdraw", `{"Amount":50,"Ref":"w-1"}`)
	}
	sc.stuck = sc.effectOf("hal", func(e api.Effect) bool { return e.State == "inflight" })
	sc.effectOf("ivy", func(e api.Effect) bool { return e.State == "inflight" })
	sc.failed = sc.effectOf("fay", func(e api.Effect) bool { return e.State == "done" })
	// q asks for an effect no node runs, and arms a timer an hour out.
	a.ok("world", "create", "q", "--universe", testworlds.CounterName)
	a.ok("world", "send", "q", typeName(sc.t, testworlds.Echo{}), `{"Key":"e-1"}`)
	a.ok("world", "send", "q", typeName(sc.t, testworlds.Arm{}), `{"AfterMs":3600000}`)
	sc.effectOf("q", func(e api.Effect) bool { return e.State == "pending" })
	sc.until("q's timer", func() bool {
		r := a.cli("timers", "list", "--world", "q")
		return r.code == cli.ExitOK && strings.Contains(r.out, "scheduled")
	})
	// A payout run, whose first step completes and which waits for a
	// signal, so that the workflow metrics have their series.
	a.ok("run", "start", ledger.WorkflowPayout, "p-1", `{"Account":"alice","Amount":5}`)
	sc.until("the payout run's first step", func() bool {
		var v api.RunView
		r := a.cli("run", "show", "p-1", "-o", "json")
		return r.code == cli.ExitOK && json.Unmarshal([]byte(r.out), &v) == nil && strings.Contains(r.out, `"validate"`)
	})
	// Two payouts on the one-slot queue: p-2 is admitted and holds the
	// slot, p-3 waits behind it.
	a.ok("run", "start", ledger.WorkflowPayout, "p-2", `{"Account":"alice","Amount":5}`, "--queue", runbookQueue)
	sc.until("p-2 to be admitted", func() bool {
		var q api.WorkflowQueue
		r := a.cli("queue", "show", runbookQueue, "-o", "json")
		return r.code == cli.ExitOK && json.Unmarshal([]byte(r.out), &q) == nil && q.Running == 1
	})
	a.ok("run", "start", ledger.WorkflowPayout, "p-3", `{"Account":"alice","Amount":5}`, "--queue", runbookQueue)
	sc.until("p-3 to wait on the queue", func() bool {
		var q api.WorkflowQueue
		r := a.cli("queue", "show", runbookQueue, "-o", "json")
		return r.code == cli.ExitOK && json.Unmarshal([]byte(r.out), &q) == nil && q.Running == 1 && q.Waiting == 1
	})
}

// effectOf waits for world's only effect to satisfy cond, and returns
// its intent hash.
func (sc *runbookScenario) effectOf(worldID string, cond func(api.Effect) bool) string {
	sc.t.Helper()
	var hash string
	sc.until(worldID+"'s effect", func() bool {
		var es []api.Effect
		r := sc.a.cli("effects", "list", "--world", worldID, "--status", "all", "-o", "json")
		if r.code != cli.ExitOK || json.Unmarshal([]byte(r.out), &es) != nil || len(es) != 1 || !cond(es[0]) {
			return false
		}
		hash = es[0].IntentHash
		return true
	})
	return hash
}

// until waits for cond, bounded by the test's time.
func (sc *runbookScenario) until(what string, cond func() bool) {
	sc.t.Helper()
	for !cond() {
		select {
		case <-sc.ctx.Done():
			sc.t.Fatalf("waiting for %s: %v", what, sc.ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// view is world id as node-a's API shows it.
func (sc *runbookScenario) view(id string) api.WorldView {
	sc.t.Helper()
	var v api.WorldView
	r := sc.a.cli("world", "show", id, "-o", "json")
	if r.code != cli.ExitOK {
		sc.t.Fatalf("world show %s: %s", id, r)
	}
	if err := json.Unmarshal([]byte(r.out), &v); err != nil {
		sc.t.Fatal(err)
	}
	return v
}

// holder is world id's lease holder ("" for none).
func (sc *runbookScenario) holder(id string) string {
	if v := sc.view(id); v.Lease != nil {
		return v.Lease.Holder
	}
	return ""
}

// live reports whether h is one of the serving nodes.
func live(h string) bool { return h == nodeA || h == nodeC }

// table checks are on the table output: rows of cells.
func hasRow(out string, cells ...string) error {
	for _, r := range rows(out) {
		if hasPrefix(r, cells...) {
			return nil
		}
	}
	return fmt.Errorf("no row starting %q", cells)
}

func hasNoRow(out, first string) error {
	for _, r := range rows(out) {
		if len(r) > 0 && r[0] == first {
			return fmt.Errorf("a row for %s: %q", first, r)
		}
	}
	return nil
}

func contains(out string, subs ...string) error {
	for _, s := range subs {
		if !strings.Contains(out, s) {
			return fmt.Errorf("%q is not in the output", s)
		}
	}
	return nil
}

// field is the value of a `world show` line (its key and the value after
// the blanks).
func field(out, key string) (string, error) {
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "  "); ok && k == key {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no %q line in the output", key)
}

func (sc *runbookScenario) runbooks() map[string]runbook {
	t := sc.t
	// The orchestrator moves bob off the dead worker: its lease expired an
	// hour ago by the store's clock.
	sc.until("bob to move off the dead worker", func() bool { return live(sc.holder("bob")) })
	var beforeResume uint64
	var stateAt string
	return map[string]runbook{
		"A node dies": {
			vars: map[string]string{"<node>": deadNode, "<world>": "bob"},
			checks: map[string]runbookCheck{
				"orrery workers list --status dead": {check: func(out string) error {
					if err := hasRow(out, deadNode, "false"); err != nil {
						return err
					}
					return hasNoRow(out, nodeA)
				}},
				"orrery lease list --worker <node>": {check: func(out string) error {
					if err := contains(out, "WORLD"); err != nil {
						return err
					}
					return hasNoRow(out, "bob")
				}},
				"orrery world show <world>": {check: func(out string) error {
					lease, err := field(out, "lease")
					if err != nil {
						return err
					}
					var holder string
					var epoch uint64
					if _, err := fmt.Sscanf(lease, "%s epoch %d", &holder, &epoch); err != nil {
						return fmt.Errorf("lease %q: %w", lease, err)
					}
					if !live(holder) || epoch <= sc.deadEpoch {
						return fmt.Errorf("lease %q: want a live node's, above the dead node's epoch %d", lease, sc.deadEpoch)
					}
					placed, err := field(out, "placed on")
					if err != nil {
						return err
					}
					if !strings.HasPrefix(placed, holder+" ") {
						return fmt.Errorf("placed on %q, held by %s", placed, holder)
					}
					return nil
				}},
				"orrery workers list": {check: func(out string) error {
					if err := hasRow(out, nodeA, "true", "false"); err != nil {
						return err
					}
					return hasRow(out, deadNode, "false")
				}},
			},
		},
		"PostgreSQL fails over": {
			vars: map[string]string{"<world>": "alice", "<query>": runbookQuery},
			checks: map[string]runbookCheck{
				"orrery workers list": {check: func(out string) error {
					return hasRow(out, nodeA, "true")
				}},
				// A world's lease is renewed in the background: read again
				// until every placed, active world shows its holder.
				"orrery lease list": {eventually: true, check: func(out string) error {
					for _, w := range []string{"alice", "bob", "hal", "fay", "ivy", "q"} {
						if hasRow(out, w, nodeA) != nil {
							return fmt.Errorf("%s has no live holder", w)
						}
					}
					return nil
				}},
				"orrery world call <world> <query>": {check: func(out string) error {
					if strings.TrimSpace(out) != "100" {
						return fmt.Errorf("alice's balance %q, want 100", out)
					}
					return nil
				}},
			},
		},
		"A world is wedged": {
			vars: map[string]string{"<world>": "wendy", "<query>": runbookQuery},
			checks: map[string]runbookCheck{
				"orrery world show <world>": {check: func(out string) error {
					if st, err := field(out, "status"); err != nil || st != "paused" && st != "active" {
						return fmt.Errorf("status %q (%v)", st, err)
					}
					st, _ := field(out, "status")
					if st == "paused" {
						if err := contains(out, "incident 42"); err != nil {
							return err
						}
						beforeResume = sc.view("wendy").Head
						return nil
					}
					// After the resume: the head passed the deposit that waited.
					head, err := field(out, "head")
					if err != nil {
						return err
					}
					if h, _ := strconv.ParseUint(head, 10, 64); h <= beforeResume {
						return fmt.Errorf("head %s, not past %d", head, beforeResume)
					}
					return nil
				}},
				"orrery journal tail <world> -n 5": {check: func(out string) error {
					return contains(out, "HEIGHT", "ledger/Deposit")
				}},
				"orrery effects list --world <world>": {check: func(out string) error {
					if err := contains(out, "INTENT"); err != nil {
						return err
					}
					if n := len(rows(out)); n != 1 {
						return fmt.Errorf("%d lines, want the header alone (wendy waits for no effect)", n)
					}
					return nil
				}},
				"orrery timers list --world <world>": {check: func(out string) error {
					if err := contains(out, "INTENT", "DUE"); err != nil {
						return err
					}
					if n := len(rows(out)); n != 1 {
						return fmt.Errorf("%d lines, want the header alone", n)
					}
					return nil
				}},
				"orrery world resume <world> --reason \"incident 42 closed\"": {check: func(out string) error {
					return hasRow(out, "wendy", ledger.UniverseAccount, "active", "incident")
				}},
				"orrery world call <world> <query>": {check: func(out string) error {
					if strings.TrimSpace(out) != "107" {
						return fmt.Errorf("wendy's balance %q, want 107 (the deposit that waited applied)", out)
					}
					return nil
				}},
			},
		},
		"A world diverges from its journal": {
			vars: map[string]string{"<world>": "dora", "<new-world>": "dora-2", "<query>": runbookQuery,
				"<height>": strconv.FormatUint(sc.divergeHeight, 10)},
			checks: map[string]runbookCheck{
				"orrery world journal <world> --limit 20": {
					before: func() {
						// The symptom: a host logged the divergence.
						sc.until("a host's log of dora's divergence", func() bool {
							for _, s := range []*served{sc.a} {
								for _, l := range strings.Split(s.err.String(), "\n") {
									if strings.Contains(l, "host: replay diverged from the journal") && strings.Contains(l, "world=dora") {
										return true
									}
								}
							}
							return false
						})
					},
					check: func(out string) error {
						return contains(out, fmt.Sprintf("replay diverged at height %d", sc.divergeHeight+1))
					}},
				"orrery world state <world> --at <height>": {check: func(out string) error {
					if err := contains(out, fmt.Sprintf("# height %d,", sc.divergeHeight)); err != nil {
						return err
					}
					stateAt = out
					return nil
				}},
				"orrery world pause <world> --reason \"diverges at height <height>\"": {check: func(out string) error {
					return hasRow(out, "dora", ledger.UniverseAccount, "paused", "diverges")
				}},
				"orrery world resume <world> --reason \"definition fixed\"": {check: func(out string) error {
					return hasRow(out, "dora", ledger.UniverseAccount, "active", "definition")
				}},
				"orrery world fork <world> <new-world> --height <height>": {check: func(out string) error {
					return contains(out, "dora-2", fmt.Sprintf("dora@%d", sc.divergeHeight))
				}},
				"orrery world archive <world> --reason \"diverged; continued as <new-world>\"": {check: func(out string) error {
					return hasRow(out, "dora", ledger.UniverseAccount, "archived", "diverged;")
				}},
				"orrery world call <new-world> <query>": {check: func(out string) error {
					var s ledger.Account
					_, body, _ := strings.Cut(stateAt, "\n")
					if err := json.Unmarshal([]byte(body), &s); err != nil {
						return fmt.Errorf("the state at the fork's height: %w", err)
					}
					if strings.TrimSpace(out) != strconv.FormatInt(s.Balance, 10) {
						return fmt.Errorf("dora-2's balance %q, want %d: the state it was forked from", out, s.Balance)
					}
					return nil
				}},
			},
		},
		"An effect is stuck": {
			vars: map[string]string{"<world>": "hal", "<effect-id>": sc.stuck, "<failed-effect-id>": sc.failed},
			checks: map[string]runbookCheck{
				"orrery effects list --status inflight": {check: func(out string) error {
					return hasRow(out, sc.stuck, world.KindHTTPRequest, "inflight")
				}},
				"orrery effects list --world <world>": {check: func(out string) error {
					return hasRow(out, sc.stuck, world.KindHTTPRequest, "inflight")
				}},
				"orrery effects hold <effect-id> --reason \"checking with the provider\"": {check: func(out string) error {
					return hasRow(out, sc.stuck, "held", "checking")
				}},
				"orrery effects release <effect-id> --reason \"the provider has no record of it\"": {check: func(out string) error {
					return hasRow(out, sc.stuck, "pending")
				}},
				"orrery effects resolve <effect-id> '{\"status\":204}' --status ok --reason \"done, per the provider\"": {check: func(out string) error {
					if !strings.HasPrefix(out, "receipt at inbox seq ") || strings.Contains(out, "already done") {
						return fmt.Errorf("not a first receipt: %q", out)
					}
					return nil
				}},
				"orrery effects retry <failed-effect-id> --reason \"the partner API is back\"": {check: func(out string) error {
					return contains(out, sc.failed, "retries 1")
				}},
				"orrery effects list --world <world> --status all": {check: func(out string) error {
					return hasRow(out, sc.stuck, world.KindHTTPRequest, "done")
				}},
				// The receipt reaches the world through its inbox.
				"orrery world state <world>": {eventually: true, check: func(out string) error {
					_, body, _ := strings.Cut(out, "\n")
					var s ledger.Account
					if err := json.Unmarshal([]byte(body), &s); err != nil {
						return err
					}
					for _, a := range s.Audits {
						if a.Intent == sc.stuck && a.Outcome == ledger.AuditOK && a.HTTPStatus == 204 {
							return nil
						}
					}
					return fmt.Errorf("no audit of %s settled ok by the receipt: %+v", sc.stuck, s.Audits)
				}},
			},
		},
		"A queue backs up": {
			vars: map[string]string{"<queue>": runbookQueue},
			checks: map[string]runbookCheck{
				"orrery effects list --status pending": {check: func(out string) error {
					for _, r := range rows(out) {
						if len(r) > 2 && r[1] == testworlds.KindEcho && r[2] == "pending" && slices.Contains(r, "q") {
							return nil
						}
					}
					return errors.New("no pending echo effect of q")
				}},
				"orrery effects list --kind http.request --status inflight": {check: func(out string) error {
					if err := contains(out, "ivy"); err != nil {
						return err
					}
					return hasNoRowContaining(out, testworlds.KindEcho)
				}},
				"orrery timers list": {check: func(out string) error {
					for _, r := range rows(out) {
						if len(r) > 0 && slices.Contains(r, "q") && slices.Contains(r, "scheduled") {
							return nil
						}
					}
					return errors.New("no scheduled timer of q")
				}},
				"orrery run list --status queued": {check: func(out string) error {
					// The running payouts are not listed as queued; the one
					// the full queue holds back is.
					if strings.Contains(out, "p-1") {
						return errors.New("the running run p-1 is listed as queued")
					}
					if err := hasNoRowContaining(out, "p-2"); err != nil {
						return fmt.Errorf("the admitted run p-2 is listed as queued: %w", err)
					}
					return contains(out, "p-3")
				}},
				"orrery queue list": {check: func(out string) error {
					// NAME CONCURRENCY PER-WORKER RATE PARTITIONED RUNNING WAITING
					return hasRow(out, runbookQueue, "1", "-", "-", "false", "1", "1")
				}},
				"orrery queue show <queue>": {check: func(out string) error {
					if r, err := field(out, "running"); err != nil || !strings.HasPrefix(r, "1") || !strings.Contains(r, "worker "+nodeA+"/runs=1") {
						return fmt.Errorf("running %q (%v): want 1, on %s's workflow worker", r, err, nodeA)
					}
					if w, err := field(out, "waiting"); err != nil || w != "1" {
						return fmt.Errorf("waiting %q (%v): want 1 (p-3)", w, err)
					}
					return contains(out, "priority 0=1")
				}},
			},
		},
		"Upgrading": {
			vars: map[string]string{"<node>": nodeA, "<world>": "tally-1", "<universe>": tallyUniverse, "<version>": "2"},
			checks: map[string]runbookCheck{
				"orrery workers drain <node> --wait": {
					// A second node joins, to take node-a's worlds.
					before: func() {
						sc.c = sc.serve(nodeC)
						sc.until("node-c to be live", func() bool {
							return hasRow(sc.a.ok("workers", "list"), nodeC, "true") == nil
						})
					},
					check: func(out string) error {
						var n int
						if _, err := fmt.Sscanf(out, nodeA+" drained: %d worlds handed off", &n); err != nil || n < 1 {
							return fmt.Errorf("no world handed off (%v)", err)
						}
						for _, r := range rows(sc.a.ok("lease", "list")) {
							if len(r) > 1 && r[0] != plane.OrchestratorWorld && r[1] == nodeA {
								return fmt.Errorf("node-a still holds %s", r[0])
							}
						}
						return nil
					}},
				"orrery workers drain <node> --undo": {
					// The operator replaces the drained node's binary.
					before: func() {
						// Its stuck effects outlast --stop-timeout: it releases
						// them for another node and says so, exit 5 (timed out).
						if code := sc.a.stop(); code != cli.ExitOK && (code != cli.ExitUnavailable || !strings.Contains(sc.a.err.String(), "effects released unfinished")) {
							t.Fatalf("node-a's serve exited %d\n%s", code, sc.a.err.String())
						}
						sc.a = sc.serve(nodeA)
						if err := hasRow(sc.a.ok("workers", "list"), nodeA, "true", "true"); err != nil {
							t.Fatalf("node-a restarted: not draining still: %v", err)
						}
					},
					check: func(out string) error {
						return contains(out, nodeA, "draining=false")
					}},
				"orrery workers list": {check: func(out string) error {
					if err := hasRow(out, nodeA, "true", "false"); err != nil {
						return err
					}
					return hasRow(out, nodeC, "true", "false")
				}},
				"orrery world upgrade <world> --to <version>": {check: func(out string) error {
					return contains(out, "tally-1", "upgrade from 1 to 2 requested")
				}},
				// The upgrade is an input its host takes in turn.
				"orrery world show <world>": {eventually: true, check: func(out string) error {
					if v, err := field(out, "version"); err != nil || v != "2" {
						return fmt.Errorf("version %q (%v), want 2", v, err)
					}
					var s tallyV2
					_, body, _ := strings.Cut(sc.a.ok("world", "state", "tally-1"), "\n")
					if err := json.Unmarshal([]byte(body), &s); err != nil {
						return fmt.Errorf("tally-1's state: %w", err)
					}
					if !s.Migrated || s.Total != 3 {
						return fmt.Errorf("tally-1's state %+v: want the v1 count carried over by the migration", s)
					}
					return nil
				}},
				"orrery world upgrade --universe <universe> --to <version>": {check: func(out string) error {
					// tally-1 is on 2 already; tally-2 is asked.
					for k, want := range map[string]string{"universe": tallyUniverse, "to": "2", "asked": "1", "already there": "1", "failed": "0"} {
						if v, err := field(out, k); err != nil || v != want {
							return fmt.Errorf("%s %q (%v), want %s", k, v, err, want)
						}
					}
					// What it asked is done: tally-2 moves to version 2.
					sc.until("tally-2 on version 2", func() bool { return sc.view("tally-2").Version == 2 })
					return nil
				}},
			},
		},
	}
}

func hasNoRowContaining(out, cell string) error {
	for _, r := range rows(out) {
		if slices.Contains(r, cell) {
			return fmt.Errorf("a row with %s: %q", cell, r)
		}
	}
	return nil
}

// checkMetrics checks that every metric the runbooks name, with the
// labels they name, is on a serving node's /metrics.
func (sc *runbookScenario) checkMetrics(prose string) {
	t := sc.t
	var scrape strings.Builder
	for _, s := range []*served{sc.a} {
		code, body := s.get("/metrics", "")
		if code != 200 {
			t.Fatalf("GET /metrics: %d", code)
		}
		scrape.WriteString(body)
	}
	lines := strings.Split(scrape.String(), "\n")
	mentions := metricMention.FindAllString(prose, -1)
	if len(mentions) == 0 {
		t.Fatal("the runbooks name no metric")
	}
	for _, m := range slices.Compact(slices.Sorted(slices.Values(mentions))) {
		name, labels, _ := strings.Cut(m, "{")
		labels = strings.TrimSuffix(labels, "}")
		var want []string
		if labels != "" {
			want = strings.Split(labels, ",")
		}
		found := false
		for _, l := range lines {
			if l == "# TYPE "+name || strings.HasPrefix(l, "# TYPE "+name+" ") {
				if len(want) == 0 {
					found = true
				}
				continue
			}
			sample, _, _ := strings.Cut(l, " ")
			sname, slabels, _ := strings.Cut(sample, "{")
			if sname != name && sname != name+"_bucket" && sname != name+"_count" && sname != name+"_sum" {
				continue
			}
			ok := true
			for _, w := range want {
				if !strings.Contains(","+strings.TrimSuffix(slabels, "}")+",", ","+strings.TrimSpace(w)+",") {
					ok = false
				}
			}
			if ok {
				found = true
			}
		}
		if !found {
			t.Errorf("a runbook names %s, which no node's /metrics has", m)
		} else {
			t.Logf("metric %s: on /metrics", m)
		}
	}
}

// typeName is v's input type name.
func typeName(t *testing.T, v any) string {
	t.Helper()
	n, err := world.TypeName(v)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// logMention is a host's log message a runbook names.
var logMention = regexp.MustCompile("`(host: [^`]+)`")

// checkLogLines checks that every host log message the runbooks name is
// one the host logs, word for word.
func checkLogLines(t *testing.T, prose string) {
	t.Helper()
	src, err := os.ReadFile("../../plane/host.go")
	if err != nil {
		t.Fatal(err)
	}
	ms := logMention.FindAllStringSubmatch(prose, -1)
	if len(ms) == 0 {
		t.Fatal("the runbooks name no host log line")
	}
	for _, m := range ms {
		if !strings.Contains(string(src), strconv.Quote(m[1])) {
			t.Errorf("a runbook names the log line %q, which plane/host.go does not log", m[1])
		}
	}
}
