package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// model is the reference the fuzzer compares the registry against.
type model struct {
	bound  map[string]int // name → index of its lease
	leases []modelLease
	alive  []bool
	closed bool
}

type modelLease struct {
	name    string
	pid     int
	ttl     time.Duration
	expires time.Time
	state   LeaseState
}

func (m *model) end(i int, st LeaseState) {
	l := &m.leases[i]
	if l.state != LeaseActive {
		return
	}
	l.state = st
	if m.bound[l.name] == i {
		delete(m.bound, l.name)
	}
}

// expireDue ends every active TTL lease whose deadline is not after now.
func (m *model) expireDue(now time.Time) {
	for i, l := range m.leases {
		if l.state == LeaseActive && l.ttl > 0 && !now.Before(l.expires) {
			m.end(i, LeaseExpired)
		}
	}
}

// FuzzRegisterNames drives a registry with arbitrary names and operation
// sequences (register with and without TTL, release, renew, unregister,
// holder exit, virtual time, close) and checks after every step that it
// agrees with a model: a name has at most one holder, Whereis, Names and
// lease states match, Names is sorted, and every error is the typed one the
// model predicts.
func FuzzRegisterNames(f *testing.F) {
	f.Add("a,b,c", []byte{0, 0x08, 0, 0x10, 0, 0x81, 5, 3, 2, 2, 0, 0x09, 4, 0, 3, 1})
	f.Add("svc", []byte{0, 0xa0, 5, 1, 2, 0, 5, 3, 5, 3, 0, 0x08, 1, 0, 1, 0})
	f.Add(",x,,ä,\x00", []byte{0, 1, 0, 2, 0, 0x19, 0, 0x18, 6, 0, 0, 0x0a})
	f.Add("alpha,beta", []byte{0, 0xe0, 0, 0xe9, 5, 3, 2, 0, 5, 3, 5, 3, 4, 1, 3, 0, 0, 0x10, 7, 0})
	f.Add("n", []byte{4, 0, 0, 0, 0, 0x20, 0, 0x28, 4, 1, 7, 0})
	f.Fuzz(func(t *testing.T, namesIn string, ops []byte) {
		names := strings.Split(namesIn, ",")
		if len(names) > 8 {
			names = names[:8]
		}
		if len(ops) > 256 {
			ops = ops[:256]
		}
		synctest.Test(t, func(t *testing.T) { runOps(t, names, ops) })
	})
}

func runOps(t *testing.T, names []string, ops []byte) {
	ex := actor.NewExecutor(1)
	sys := actor.NewSystem(actor.WithExecutor(ex))
	defer closeSystem(t, sys)
	reg := New(ex)

	// Three live processes, one that has completed, and the zero PID.
	pids := []actor.PID{spawnIdle(t, sys, "p0"), spawnIdle(t, sys, "p1"), spawnIdle(t, sys, "p2"), deadPID(t, sys), {}}
	m := &model{bound: map[string]int{}, alive: []bool{true, true, true, false, false}}
	var leases []*Lease

	for step := 0; step+1 < len(ops); step += 2 {
		op, arg := ops[step]%8, ops[step+1]
		desc := fmt.Sprintf("step %d op %d arg %#x", step/2, op, arg)
		switch op {
		case 0: // register
			name := names[int(arg)%len(names)]
			pi := int(arg>>3) % len(pids)
			var opts []Option
			var ttl time.Duration
			if arg&0x80 != 0 {
				ttl = time.Duration((arg>>5)&3+1) * time.Second
				opts = append(opts, WithTTL(ttl))
			}
			l, err := reg.Register(name, pids[pi], opts...)
			desc += fmt.Sprintf(" Register(%q, p%d, ttl %v) = %v", name, pi, ttl, err)
			holder, taken := m.bound[name]
			switch {
			case name == "":
				wantErr(t, desc, err, ErrInvalidName)
			case !m.alive[pi]:
				var np *NoProcError
				if !errors.As(err, &np) || !errors.Is(err, actor.ErrNoProc) {
					t.Fatalf("%s: want *NoProcError", desc)
				}
			case m.closed:
				wantErr(t, desc, err, ErrClosed)
			case taken:
				var nt *NameTakenError
				if !errors.As(err, &nt) || !errors.Is(err, ErrNameTaken) || nt.Holder != pids[m.leases[holder].pid] || nt.Name != name {
					t.Fatalf("%s: want *NameTakenError with holder %s", desc, pids[m.leases[holder].pid])
				}
			default:
				if err != nil || l == nil {
					t.Fatalf("%s: want success", desc)
				}
				leases = append(leases, l)
				m.leases = append(m.leases, modelLease{name: name, pid: pi, ttl: ttl, expires: ex.Now().Add(ttl)})
				m.bound[name] = len(m.leases) - 1
			}
			if err != nil && l != nil {
				t.Fatalf("%s: a lease returned with an error", desc)
			}
		case 1: // release
			if len(leases) > 0 {
				i := int(arg) % len(leases)
				leases[i].Release()
				m.end(i, LeaseReleased)
			}
		case 2: // renew
			if len(leases) > 0 {
				i := int(arg) % len(leases)
				err := leases[i].Renew()
				desc += fmt.Sprintf(" Renew(lease %d) = %v", i, err)
				switch ml := &m.leases[i]; ml.state {
				case LeaseActive:
					if err != nil {
						t.Fatalf("%s: want success", desc)
					}
					ml.expires = ex.Now().Add(ml.ttl)
				case LeaseExpired:
					wantErr(t, desc, err, ErrLeaseExpired)
				default:
					wantErr(t, desc, err, ErrLeaseReleased)
				}
				var le *LeaseError
				if err != nil && (!errors.As(err, &le) || le.State != m.leases[i].state) {
					t.Fatalf("%s: want *LeaseError in state %s", desc, m.leases[i].state)
				}
			}
		case 3: // unregister
			name := names[int(arg)%len(names)]
			i, want := m.bound[name]
			if got := reg.Unregister(name); got != want {
				t.Fatalf("%s: Unregister(%q) = %v, want %v", desc, name, got, want)
			}
			if want {
				m.end(i, LeaseReleased)
			}
		case 4: // a holder exits
			pi := int(arg) % 3
			pids[pi].Abort()
			m.alive[pi] = false
			for i, l := range m.leases {
				if l.pid == pi {
					m.end(i, LeaseHolderExited)
				}
			}
		case 5: // virtual time passes
			d := time.Duration(arg%4+1) * 500 * time.Millisecond
			if err := actor.Sleep(context.Background(), ex, d); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			m.expireDue(ex.Now())
		case 6: // close, rarely
			if arg%16 == 0 {
				reg.Close()
				m.closed = true
				for i := range m.leases {
					m.end(i, LeaseReleased)
				}
			}
		case 7: // nothing changes: the checks below run on a quiet registry
		}
		checkModel(t, desc, reg, m, names, pids, leases)
	}
}

func wantErr(t *testing.T, desc string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: want %v", desc, sentinel)
	}
}

func checkModel(t *testing.T, desc string, reg *Registry, m *model, names []string, pids []actor.PID, leases []*Lease) {
	t.Helper()
	got := reg.Names()
	if !slices.IsSorted(got) {
		t.Fatalf("%s: Names() = %q is not sorted", desc, got)
	}
	if want := slices.Sorted(maps.Keys(m.bound)); !slices.Equal(got, want) {
		t.Fatalf("%s: Names() = %q, want %q", desc, got, want)
	}
	for _, n := range names {
		pid, ok := reg.Whereis(n)
		i, want := m.bound[n]
		if ok != want || (ok && pid != pids[m.leases[i].pid]) {
			t.Fatalf("%s: Whereis(%q) = %s, %v; model %v", desc, n, pid, ok, want)
		}
	}
	holders := map[string]int{}
	for i, l := range leases {
		st := l.State()
		if st != m.leases[i].state {
			t.Fatalf("%s: lease %d (%q) state %s, model %s", desc, i, l.Name(), st, m.leases[i].state)
		}
		if st == LeaseActive {
			holders[l.Name()]++
			if holders[l.Name()] > 1 {
				t.Fatalf("%s: name %q has two active leases", desc, l.Name())
			}
			if pid, ok := reg.Whereis(l.Name()); !ok || pid != l.PID() {
				t.Fatalf("%s: active lease on %q for %s, but Whereis = %s, %v", desc, l.Name(), l.PID(), pid, ok)
			}
		}
	}
}
