package groupcommit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// req is a test request: its answer is err (nil: ran), or the refusal.
type req struct {
	Ticket
	ctx     context.Context
	name    string
	done    chan struct{}
	ran     bool
	refused error
}

func newReq(ctx context.Context, name string) *req {
	return &req{ctx: ctx, name: name, done: make(chan struct{})}
}

func (r *req) Context() context.Context  { return r.ctx }
func (r *req) Answered() <-chan struct{} { return r.done }
func (r *req) Refuse(err error)          { r.refused = err; close(r.done) }

// recorder runs batches, remembering them; a request named "hold" blocks
// its batch until release is closed.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	holding chan struct{}
	release chan struct{}
}

func newRecorder() *recorder {
	return &recorder{holding: make(chan struct{}), release: make(chan struct{})}
}

func (rc *recorder) run(batch []*req) {
	names := make([]string, len(batch))
	for i, r := range batch {
		names[i] = r.name
	}
	rc.mu.Lock()
	rc.batches = append(rc.batches, names)
	rc.mu.Unlock()
	for _, r := range batch {
		if r.name == "hold" {
			close(rc.holding)
			<-rc.release
		}
	}
	for _, r := range batch {
		r.ran = true
		close(r.done)
	}
}

func (rc *recorder) got() [][]string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([][]string(nil), rc.batches...)
}

// hold occupies the committer's lane with a request that waits for
// rc.release, and returns once it is running.
func hold(t *testing.T, c *Committer[*req], rc *recorder) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- c.Do("", newReq(context.Background(), "hold")) }()
	<-rc.holding
	return errc
}

// queue sends r through Do in the background and waits until it is queued.
func queue(c *Committer[*req], r *req) <-chan error {
	errc := make(chan error, 1)
	n := len(c.Queue(0))
	go func() { errc <- c.Do("", r) }()
	for len(c.Queue(0)) == n {
		time.Sleep(time.Microsecond)
	}
	return errc
}

func start(rc *recorder, max int) *Committer[*req] {
	return New(Config[*req]{Lanes: 1, Max: max, Queue: 16, Spins: 8, Run: rc.run})
}

// The requests queued while a batch runs are the next batch, cut at Max.
func TestQueuedRequestsShareABatch(t *testing.T) {
	rc := newRecorder()
	c := start(rc, 3)
	defer c.Close()
	held := hold(t, c, rc)
	var errs []<-chan error
	for _, n := range []string{"a", "b", "c", "d"} {
		errs = append(errs, queue(c, newReq(context.Background(), n)))
	}
	close(rc.release)
	for _, e := range append(errs, held) {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	got := rc.got()
	want := [][]string{{"hold"}, {"a", "b", "c"}, {"d"}}
	if len(got) != len(want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("batches %v, want %v", got, want)
			}
		}
	}
}

// A request whose caller gives up while it is queued never runs, and the
// caller gets its context's error.
func TestAbandonedWhileQueuedNeverRuns(t *testing.T) {
	rc := newRecorder()
	c := start(rc, 8)
	defer c.Close()
	held := hold(t, c, rc)
	ctx, cancel := context.WithCancel(context.Background())
	r := newReq(ctx, "gone")
	errc := queue(c, r)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
	other := newReq(context.Background(), "other")
	oerr := queue(c, other)
	close(rc.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-oerr; err != nil || !other.ran {
		t.Fatalf("other: %v, ran %v", err, other.ran)
	}
	if r.ran || r.refused != nil {
		t.Fatalf("abandoned request ran %v, refused %v", r.ran, r.refused)
	}
	for _, b := range rc.got() {
		for _, n := range b {
			if n == "gone" {
				t.Fatalf("abandoned request in batch %v", b)
			}
		}
	}
}

// A request whose context ends once its batch runs reports its real
// outcome: its caller waits for it.
func TestStartedRequestReportsItsOutcome(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started, finish := make(chan struct{}), make(chan struct{})
	c := New(Config[*req]{Lanes: 1, Max: 1, Queue: 1, Run: func(b []*req) {
		close(started)
		<-finish
		b[0].ran = true
		close(b[0].done)
	}})
	defer c.Close()
	r := newReq(ctx, "r")
	errc := make(chan error, 1)
	go func() { errc <- c.Do("", r) }()
	<-started
	cancel()
	close(finish)
	if err := <-errc; err != nil || !r.ran {
		t.Fatalf("Do = %v, ran %v; want nil, true", err, r.ran)
	}
}

// A request whose context ended before its batch was cut is refused with
// the context's error, not run; its neighbours run.
func TestEndedContextIsRefusedAtCut(t *testing.T) {
	rc := newRecorder()
	c := start(rc, 8)
	defer c.Close()
	held := hold(t, c, rc)
	ctx, cancel := context.WithCancel(context.Background())
	r := newReq(ctx, "late")
	// Queue it directly, as a caller that has not yet noticed its context.
	c.lanes[0].in <- r
	cancel()
	ok := newReq(context.Background(), "ok")
	okc := queue(c, ok)
	close(rc.release)
	<-held
	if err := <-okc; err != nil || !ok.ran {
		t.Fatalf("ok: %v, ran %v", err, ok.ran)
	}
	<-r.done
	if r.ran || !errors.Is(r.refused, context.Canceled) {
		t.Fatalf("late: ran %v, refused %v", r.ran, r.refused)
	}
}

// Close lets the batch in progress finish, refuses what is queued, and
// refuses later requests; it is idempotent.
func TestCloseRefusesQueuedAndLater(t *testing.T) {
	rc := newRecorder()
	c := start(rc, 8)
	held := hold(t, c, rc)
	q := newReq(context.Background(), "queued")
	qerr := queue(c, q)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	for {
		select {
		case <-c.quit:
		default:
			time.Sleep(time.Microsecond)
			continue
		}
		break
	}
	close(rc.release)
	<-closed
	c.Close()
	if err := <-held; err != nil {
		t.Fatalf("batch in progress: %v", err)
	}
	err := <-qerr
	if err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("queued: Do = %v", err)
	}
	if q.ran || (err == nil && !errors.Is(q.refused, ErrClosed)) {
		t.Fatalf("queued request ran %v, refused %v", q.ran, q.refused)
	}
	if err := c.Do("", newReq(context.Background(), "after")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
}

// Requests of one key go to one lane, and one lane's batches never
// overlap; with several lanes, every request is answered.
func TestLanes(t *testing.T) {
	var mu sync.Mutex
	running := map[*lane[*req]]bool{}
	var c *Committer[*req]
	c = New(Config[*req]{Lanes: 4, Max: 4, Queue: 8, Run: func(b []*req) {
		l := c.lane(b[0].name)
		mu.Lock()
		if running[l] {
			t.Errorf("two batches of one lane at once")
		}
		running[l] = true
		mu.Unlock()
		for _, r := range b {
			if c.lane(r.name) != l {
				t.Errorf("batch of lane %p holds %q of another lane", l, r.name)
			}
		}
		mu.Lock()
		running[l] = false
		mu.Unlock()
		for _, r := range b {
			r.ran = true
			close(r.done)
		}
	}})
	defer c.Close()
	var wg sync.WaitGroup
	for i := range 64 {
		k := string(rune('a' + i%5))
		wg.Go(func() {
			r := newReq(context.Background(), k)
			if err := c.Do(k, r); err != nil || !r.ran {
				t.Errorf("Do(%s) = %v, ran %v", k, err, r.ran)
			}
		})
	}
	wg.Wait()
}

// While a batch is smaller than the lane's last one, the lane lingers (at
// most Linger) for the rest; the time is the bubble's fake clock.
func TestLingerWaitsForTheLastBatchSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sizes []int
		gate := make(chan struct{})
		c := New(Config[*req]{Lanes: 1, Max: 8, Queue: 8, Linger: 200 * time.Microsecond, Run: func(b []*req) {
			mu.Lock()
			sizes = append(sizes, len(b))
			mu.Unlock()
			if b[0].name == "gate" {
				<-gate
			}
			for _, r := range b {
				close(r.done)
			}
		}})
		defer c.Close()
		do := func(name string) {
			if err := c.Do("", newReq(context.Background(), name)); err != nil {
				t.Error(err)
			}
		}
		// A batch of 3: the gate, then two queued behind it (batch 2).
		go do("gate")
		synctest.Wait()
		go do("x")
		go do("x")
		synctest.Wait()
		close(gate)
		synctest.Wait()
		// The lane's last batch was 2: one request alone lingers, and a
		// second arriving within Linger joins it.
		go do("y")
		time.Sleep(100 * time.Microsecond)
		go do("y")
		synctest.Wait()
		// Alone for longer than Linger, a request commits alone.
		go do("z")
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := []int{1, 2, 2, 1}
		if len(sizes) != len(want) {
			t.Fatalf("batch sizes %v, want %v", sizes, want)
		}
		for i := range want {
			if sizes[i] != want[i] {
				t.Fatalf("batch sizes %v, want %v", sizes, want)
			}
		}
	})
}
