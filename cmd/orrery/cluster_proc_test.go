//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/store/postgres"
)

const (
	// dsnEnv names the PostgreSQL the cluster tests run on; when it is
	// set they never skip (CI sets it).
	dsnEnv = "ORRERY_TEST_POSTGRES_DSN"
	// serveEnv, in a child, holds the JSON array of `orrery` arguments
	// the re-executed test binary runs instead of the tests.
	serveEnv = "ORRERY_CLUSTER_SERVE"
	// versionsEnv, in a child, names the versions of the test world and
	// workflow definitions its binary carries: "1", "1,2" or "2" (see
	// testAppFor). Unset, a child carries v1, as every binary did before
	// a second version existed.
	versionsEnv = "ORRERY_CLUSTER_VERSIONS"

	// The children's lease and claim TTLs. Everything the hosts and the
	// orchestrator time by derives from the lease TTL: renewals start a
	// third of it before expiry, the backstop scans of the hosts and the
	// orchestrator run every half of it, and a worker is live while its
	// last heartbeat is younger than it.
	leaseTTL = 2 * time.Second
	claimTTL = 5 * time.Second
)

// clusterDB is one test's own database: the DSN the children use and the
// test process's own store handle on it, for the checks.
type clusterDB struct {
	name string
	dsn  string // the database's DSN, direct to the server
	st   *postgres.Store
}

// newClusterDB creates a database for t, opens the test's store on it
// (which applies the migrations before any child starts) and drops the
// database, connections and all, when t ends. Without the DSN it skips.
func newClusterDB(t *testing.T) *clusterDB {
	t.Helper()
	admin := os.Getenv(dsnEnv)
	if admin == "" {
		t.Skipf("%s is not set: the cluster tests need PostgreSQL (CI sets it)", dsnEnv)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("orrery_cluster_%d_%x", os.Getpid(), b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := adminExec(ctx, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("%s does not parse as a URL: %v", dsnEnv, err)
	}
	u.Path = "/" + name
	db := &clusterDB{name: name, dsn: u.String()}
	db.st, err = postgres.Open(ctx, db.dsn, postgres.WithMaxConns(6))
	if err != nil {
		t.Fatalf("open the test's store on %s: %v", name, err)
	}
	t.Cleanup(func() { _ = db.st.Close() })
	return db
}

// via returns the database's DSN with its host and port replaced by addr
// (a proxy's).
func (db *clusterDB) via(addr string) string {
	u, err := url.Parse(db.dsn)
	if err != nil {
		panic(err) // db.dsn was built from a parsed URL
	}
	u.Host = addr
	return u.String()
}

// adminExec runs one statement on the admin DSN. CREATE DATABASE copies
// template1 and fails while another session is connected to it (another
// package's test may be creating a database too), so that error is retried.
func adminExec(ctx context.Context, dsn, sql string) error {
	for {
		err := func() error {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			_, err = conn.Exec(ctx, sql)
			return err
		}()
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "55006" { // object_in_use
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// child is one `orrery serve` process: the test binary re-executed.
type child struct {
	worker   string
	dsn      string // the store it serves
	versions string // the definition versions it carries (versionsEnv); "" is v1
	addr     string // the API's base URL
	api      *api.Client
	cmd      *exec.Cmd
	stderr   string // the file its stderr goes to
	lines    chan string
	extra    []string // serve's arguments beyond the common ones (its roles)
	// probes: it serves its probes and metrics only (no api role), so the
	// load and the checks never ask its API.
	probes bool

	done  chan struct{} // closed when the process has exited
	state *os.ProcessState

	mu      sync.Mutex
	killed  bool // SIGKILLed on purpose
	stopped bool // SIGSTOPped and not continued
	termed  bool // stopped gracefully already (term)
}

// serveLine is the first line `orrery serve` prints.
var serveLine = regexp.MustCompile(`^orrery serve: worker (\S+), store (.+), (API|probes) (https?://\S+)$`)

// cluster is a test's children and what they share.
type cluster struct {
	t      *testing.T
	db     *clusterDB
	tr     *http.Transport // the test's HTTP clients' connections
	target *payTarget
	ttl    time.Duration // the children's lease TTL

	// procs are the running incarnations, one slot per worker. Only the
	// test's goroutine replaces a slot (restart), under mu; other
	// goroutines read them through current.
	mu    sync.Mutex
	procs []*child
	all   []*child // every incarnation ever started, for the stop and the logs
}

// newCluster starts n children on storeDSN and waits until every one is a
// live worker. They are stopped with SIGTERM when t ends, each expected to
// exit 0 (a data race in a child makes it exit 66).
func newCluster(t *testing.T, db *clusterDB, storeDSN string, n int) *cluster {
	dsns := make([]string, n)
	for i := range dsns {
		dsns[i] = storeDSN
	}
	return newClusterOn(t, db, dsns, leaseTTL)
}

// newClusterOn is newCluster with one store DSN per child (each through
// its own proxy, say) and the children's lease TTL.
func newClusterOn(t *testing.T, db *clusterDB, dsns []string, ttl time.Duration) *cluster {
	t.Helper()
	return newClusterWith(t, db, dsns, ttl, nil)
}

// newClusterWith is newClusterOn with, for child i, the serve arguments
// extra[i] (nil: none), say its --roles.
func newClusterWith(t *testing.T, db *clusterDB, dsns []string, ttl time.Duration, extra [][]string) *cluster {
	t.Helper()
	c := &cluster{t: t, db: db, tr: http.DefaultTransport.(*http.Transport).Clone(), target: newPayTarget(t), ttl: ttl}
	c.tr.MaxIdleConnsPerHost = 32
	t.Cleanup(c.tr.CloseIdleConnections)
	// The children's logs live in t's temporary directories, which go
	// with the cleanup the first TempDir registers: made before stopAll
	// is registered, it runs after it, and stopAll can still read them.
	_ = t.TempDir()
	t.Cleanup(c.stopAll) // before the first start: a failed start stops the others
	for i, dsn := range dsns {
		var args []string
		if i < len(extra) {
			args = extra[i]
		}
		p := c.start(fmt.Sprintf("w%d", i+1), dsn, args...)
		c.procs = append(c.procs, p)
		c.all = append(c.all, p)
	}
	for _, p := range c.procs {
		c.connect(p)
	}
	c.awaitLive(c.procs, clusterBound)
	return c
}

// connect waits for p's address and makes its API client.
func (c *cluster) connect(p *child) {
	c.t.Helper()
	if err := p.awaitAddr(60 * time.Second); err != nil {
		c.t.Fatal(err)
	}
	cl, err := api.NewClient(p.addr, "", api.WithHTTPClient(&http.Client{Transport: c.tr}))
	if err != nil {
		c.t.Fatal(err)
	}
	p.api = cl
}

// current returns the running incarnations' slots.
func (c *cluster) current() []*child {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.procs)
}

// restart starts worker p again (p must have exited), with the same
// worker id and store DSN, in p's slot, and returns the new incarnation
// once it serves.
func (c *cluster) restart(p *child) *child {
	c.t.Helper()
	<-p.done
	q := c.startWith(p.worker, p.dsn, p.versions, p.extra...)
	c.mu.Lock()
	c.all = append(c.all, q)
	c.mu.Unlock()
	c.connect(q)
	c.mu.Lock()
	for i := range c.procs {
		if c.procs[i] == p {
			c.procs[i] = q
		}
	}
	c.mu.Unlock()
	return q
}

// replace is one step of a rolling upgrade: it stops p gracefully and
// starts, in its slot, a new process on the same store under a new worker
// id (as a new release's process would be) with a binary carrying
// versions, and returns it once it is a live worker.
func (c *cluster) replace(p *child, worker, versions string) *child {
	c.t.Helper()
	c.term(p)
	q := c.startWith(worker, p.dsn, versions, p.extra...)
	c.mu.Lock()
	c.all = append(c.all, q)
	c.mu.Unlock()
	c.connect(q)
	c.mu.Lock()
	for i := range c.procs {
		if c.procs[i] == p {
			c.procs[i] = q
		}
	}
	c.mu.Unlock()
	c.awaitLive([]*child{q}, clusterBound)
	return q
}

// childEnv is the test's environment for a child: without the variables
// that would change what `orrery serve` does (a token, an OTLP endpoint),
// plus the arguments to run.
func childEnv(args []string, versions string) ([]string, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == serveEnv || k == versionsEnv || k == "ORRERY_TOKEN" || k == "ORRERY_ADDR" || strings.HasPrefix(k, "OTEL_") {
			continue
		}
		env = append(env, kv)
	}
	if versions != "" {
		env = append(env, versionsEnv+"="+versions)
	}
	return append(env, serveEnv+"="+string(raw)), nil
}

func (c *cluster) start(worker, storeDSN string, extra ...string) *child {
	c.t.Helper()
	return c.startWith(worker, storeDSN, "", extra...)
}

// startWith starts worker on storeDSN with a binary carrying versions
// (versionsEnv) and serve's extra arguments.
func (c *cluster) startWith(worker, storeDSN, versions string, extra ...string) *child {
	t := c.t
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env, err := childEnv(append([]string{
		"serve", "--store", storeDSN, "--worker-id", worker, "--listen", "127.0.0.1:0",
		"--lease-ttl", c.ttl.String(), "--claim-ttl", claimTTL.String(), "--log-level", "warn",
	}, extra...), versions)
	if err != nil {
		t.Fatal(err)
	}
	p := &child{worker: worker, dsn: storeDSN, versions: versions, extra: extra, stderr: filepath.Join(t.TempDir(), worker+".stderr"), done: make(chan struct{})}
	errf, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(exe)
	p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = env, pw, errf
	p.cmd.SysProcAttr = childAttr()
	if err := p.cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		t.Fatalf("start %s: %v", worker, err)
	}
	pw.Close()
	lines := make(chan string, 1)
	go func() { // stdout: the first line is the address; the rest is drained
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		close(p.done)
	}()
	p.lines = lines
	return p
}

// awaitAddr reads the API's address from the child's first stdout line.
func (p *child) awaitAddr(limit time.Duration) error {
	select {
	case line, ok := <-p.lines:
		if !ok {
			<-p.done
			return fmt.Errorf("%s exited (%v) before printing its address; stderr:\n%s", p.worker, p.state, p.tail())
		}
		m := serveLine.FindStringSubmatch(line)
		if m == nil || m[1] != p.worker {
			return fmt.Errorf("%s: unexpected first line %q", p.worker, line)
		}
		p.addr, p.probes = m[4], m[3] == "probes"
		return nil
	case <-time.After(limit):
		return fmt.Errorf("%s printed no address within %v; stderr:\n%s", p.worker, limit, p.tail())
	}
}

// awaitLive waits until every one of procs is a live, non-draining worker
// in the inventory.
func (c *cluster) awaitLive(procs []*child, limit time.Duration) {
	c.t.Helper()
	want := map[string]bool{}
	for _, p := range procs {
		want[p.worker] = true
	}
	var last []api.Worker
	ok := poll(limit, 50*time.Millisecond, func() bool {
		ws, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) { return cl.Workers(ctx) })
		if err != nil {
			return false
		}
		last = ws.([]api.Worker)
		n := 0
		for _, w := range last {
			if want[w.ID] && w.Live && !w.Draining {
				n++
			}
		}
		return n == len(want)
	})
	if !ok {
		c.t.Fatalf("workers %v not all live within %v; inventory: %+v", keys(want), limit, last)
	}
}

// anyAPI runs f against the first running child that answers.
func (c *cluster) anyAPI(f func(cl *api.Client, ctx context.Context) (any, error)) (any, error) {
	var err error
	for _, p := range c.current() {
		if !p.serves() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var v any
		v, err = f(p.api, ctx)
		cancel()
		if err == nil {
			return v, nil
		}
	}
	if err == nil {
		err = errors.New("no running process")
	}
	return nil, err
}

// running reports whether the process is alive and not stopped.
func (p *child) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
		return !p.stopped
	}
}

// serves reports whether the process is running and serves the API.
func (p *child) serves() bool { return !p.probes && p.running() }

// add starts one more child, worker on storeDSN with extra arguments,
// and returns it once it serves (its probes, at least).
func (c *cluster) add(worker, storeDSN string, extra ...string) *child {
	c.t.Helper()
	p := c.start(worker, storeDSN, extra...)
	c.mu.Lock()
	c.all = append(c.all, p)
	c.mu.Unlock()
	// Connected before the load can see it.
	c.connect(p)
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

func (p *child) signal(sig syscall.Signal) error {
	return p.cmd.Process.Signal(sig)
}

// kill is kill -9.
func (c *cluster) kill(p *child) {
	c.t.Helper()
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if err := p.signal(syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill -9 %s: %v", p.worker, err)
	}
	select {
	case <-p.done:
	case <-time.After(clusterBound):
		c.t.Fatalf("%s still running %v after SIGKILL", p.worker, clusterBound)
	}
}

// pause is SIGSTOP; resume is SIGCONT.
func (c *cluster) pause(p *child) {
	c.t.Helper()
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	if err := p.signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", p.worker, err)
	}
}

func (c *cluster) resume(p *child) {
	c.t.Helper()
	if err := p.signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("SIGCONT %s: %v", p.worker, err)
	}
	p.mu.Lock()
	p.stopped = false
	p.mu.Unlock()
}

// term is the graceful stop: SIGTERM, and the process must exit 0 within
// its stop timeout.
func (c *cluster) term(p *child) {
	t := c.t
	t.Helper()
	p.mu.Lock()
	stopped := p.stopped
	p.termed = true
	p.mu.Unlock()
	select {
	case <-p.done:
		t.Errorf("%s had exited (%v) before its SIGTERM; stderr:\n%s", p.worker, p.state, p.tail())
		return
	default:
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM %s: %v", p.worker, err)
	}
	if stopped {
		c.resume(p)
	}
	select {
	case <-p.done:
		if code := p.state.ExitCode(); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0; stderr:\n%s", p.worker, code, p.tail())
		}
	case <-time.After(45 * time.Second):
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		t.Errorf("%s did not exit within 45s of SIGTERM; stderr:\n%s", p.worker, p.tail())
	}
}

// stopAll stops every running child gracefully, then reports what the
// children's logs say when something went wrong: a data race always, the
// logs' tails when the test failed.
func (c *cluster) stopAll() {
	c.mu.Lock()
	all := slices.Clone(c.all)
	c.mu.Unlock()
	for _, p := range all {
		p.mu.Lock()
		skip := p.killed || p.termed
		p.mu.Unlock()
		if !skip {
			c.term(p)
		}
		<-p.done
	}
	for _, p := range all {
		b, _ := os.ReadFile(p.stderr)
		if bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			c.t.Errorf("%s reported a data race:\n%s", p.worker, b)
		} else if c.t.Failed() {
			c.t.Logf("%s stderr (tail):\n%s", p.worker, p.tail())
		}
	}
}

// tail is the end of the child's stderr.
func (p *child) tail() string {
	b, err := os.ReadFile(p.stderr)
	if err != nil {
		return err.Error()
	}
	const n = 6000
	if len(b) > n {
		b = append([]byte("…"), b[len(b)-n:]...)
	}
	return string(b)
}

// byWorker returns the child running worker.
func (c *cluster) byWorker(worker string) *child {
	for _, p := range c.procs {
		if p.worker == worker {
			return p
		}
	}
	c.t.Fatalf("no process is worker %q", worker)
	return nil
}

// others returns the children other than p.
func (c *cluster) others(p *child) []*child {
	var out []*child
	for _, q := range c.procs {
		if q != p {
			out = append(out, q)
		}
	}
	return out
}

// poll calls cond every interval until it holds or limit has passed.
func poll(limit, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}
