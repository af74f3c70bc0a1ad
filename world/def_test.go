package world_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/handlers"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

func TestInputTypeNamesComeFromTheGoTypeOrWorldType(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{Deposit{}, "world_test.Deposit"},
		{Renamed{}, "ledger/Renamed@1"},
		{world.Receipt{}, world.ReceiptType},
	} {
		if got, err := world.TypeName(c.v); err != nil || got != c.want {
			t.Errorf("TypeName(%T) = %q, %v; want %q", c.v, got, err, c.want)
		}
	}
	def := effectsDef()
	if err := def.Err(); err != nil {
		t.Fatal(err)
	}
	types := def.Types()
	for _, want := range []string{"world_test.Deposit", "ledger/Renamed@1", world.ReceiptType} {
		if !slices.Contains(types, want) {
			t.Errorf("Types() = %v lacks %s", types, want)
		}
	}
	if !slices.IsSorted(types) {
		t.Error("Types() is not sorted")
	}
}

type sysNamed struct{}

func (sysNamed) WorldType() string { return "sys/Mine" }

func TestDefinitionMistakesAreTypedErrorsAndNothingRuns(t *testing.T) {
	noop := func(*world.Ctx, *Ledger, Deposit) error { return nil }
	for name, c := range map[string]struct {
		build func() *world.Def[Ledger]
		cause error
	}{
		"duplicate handler": {func() *world.Def[Ledger] {
			d := world.New[Ledger]("l", 1)
			world.On(d, noop)
			world.On(d, noop)
			return d
		}, handlers.ErrDuplicateHandler},
		"nil handler": {func() *world.Def[Ledger] {
			d := world.New[Ledger]("l", 1)
			world.On[Ledger, Deposit](d, nil)
			return d
		}, handlers.ErrNilHandler},
		"late handler": {func() *world.Def[Ledger] {
			d := world.New[Ledger]("l", 1)
			_, _ = world.Load(d, "w", world.Snapshot{})
			world.On(d, noop)
			return d
		}, handlers.ErrRegisterAfterStart},
		"pointer type": {func() *world.Def[Ledger] {
			d := world.New[Ledger]("l", 1)
			world.On(d, func(*world.Ctx, *Ledger, *Deposit) error { return nil })
			return d
		}, nil},
		"unnamed type": {func() *world.Def[Ledger] {
			d := world.New[Ledger]("l", 1)
			world.On(d, func(*world.Ctx, *Ledger, int) error { return nil })
			return d
		}, nil},
		"interface type": {func() *world.Def[Ledger] {
			d := world.New[Ledger]("l", 1)
			world.On(d, func(*world.Ctx, *Ledger, error) error { return nil })
			return d
		}, nil},
		"reserved name": {func() *world.Def[Ledger] {
			d := world.New[Ledger]("l", 1)
			world.On(d, func(*world.Ctx, *Ledger, sysNamed) error { return nil })
			return d
		}, nil},
		"empty name": {func() *world.Def[Ledger] { return world.New[Ledger]("", 1) }, nil},
		"version 0":  {func() *world.Def[Ledger] { return world.New[Ledger]("l", 0) }, nil},
		"builtin kind": {func() *world.Def[Ledger] {
			d := world.New[Ledger]("l", 1)
			world.EffectKind[Email](d, world.KindHTTPRequest)
			return d
		}, nil},
		"timer kind": {func() *world.Def[Ledger] {
			d := world.New[Ledger]("l", 1)
			world.EffectKind[Email](d, world.KindTimerSet)
			return d
		}, nil},
		"pointer params": {func() *world.Def[Ledger] { d := world.New[Ledger]("l", 1); world.EffectKind[*Email](d, "e"); return d }, nil},
	} {
		t.Run(name, func(t *testing.T) {
			d := c.build()
			err := d.Err()
			var de *world.DefError
			if !errors.Is(err, world.ErrInvalidDef) || !errors.As(err, &de) {
				t.Fatalf("Err() = %v, want a DefError", err)
			}
			if c.cause != nil && !errors.Is(err, c.cause) {
				t.Fatalf("Err() = %v, want cause %v", err, c.cause)
			}
			if _, err := world.Load(d, "w", world.Snapshot{}); !errors.Is(err, world.ErrInvalidDef) {
				t.Fatalf("Load on a broken definition: %v", err)
			}
			if _, err := d.Step("w", world.Snapshot{}, world.Input{Seq: 1, Kind: vocab.KindEvent}, t0); !errors.Is(err, world.ErrInvalidDef) {
				t.Fatalf("Step on a broken definition: %v", err)
			}
		})
	}
}

func TestLoadRejectsStatesTheKernelDidNotWrite(t *testing.T) {
	def := effectsDef()
	f := newFeeder(t, def, "w")
	f.event(Deposit{Amount: 1})
	good := f.w.State()
	for name, state := range map[string][]byte{
		"not CBOR":      {0xff},
		"empty":         {},
		"not canonical": append([]byte{0xb8, good[0] & 0x1f}, good[1:]...), // map head in a longer form
		"trailing":      append(append([]byte{}, good...), 0),
	} {
		if _, err := world.Load(def, "w", world.Snapshot{Height: 1, State: state}); !errors.Is(err, world.ErrState) {
			t.Errorf("%s: Load = %v, want ErrState", name, err)
		}
	}
	if _, err := world.Load(def, "", world.Snapshot{}); !errors.Is(err, world.ErrState) {
		t.Error("a world without id loaded")
	}
	w, err := world.Load(def, "w", world.Snapshot{Height: 1, State: good})
	if err != nil || w.StateHash() != f.w.StateHash() || w.Height() != 1 {
		t.Fatalf("a state the kernel wrote does not load: %v", err)
	}
}

// CheckInput tells a client's input that would reach a handler from one
// that names no handler or carries a value of the wrong shape, running
// nothing.
func TestCheckInputNamesTheHandlerAndDecodesTheValue(t *testing.T) {
	type Acct struct{ Balance int64 }
	type Dep struct{ Amount int64 }
	d := world.New[Acct]("check.acct", 1)
	ran := false
	world.On(d, func(c *world.Ctx, s *Acct, m Dep) error { ran = true; return nil })
	name, err := world.TypeName(Dep{})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := event.Marshal(Dep{Amount: 5})
	if err := d.CheckInput(name, good); err != nil {
		t.Fatalf("a good input: %v", err)
	}
	wrong, _ := event.Marshal(map[string]any{"Amount": "five"})
	for _, tc := range []struct {
		typ   string
		value []byte
		want  string
	}{
		{"nope.Type", good, `no handler for type "nope.Type" (this world handles ` + name + `)`},
		{world.ReceiptType, good, "no handler"},
		{name, wrong, "does not decode"},
		{name, []byte{0xff}, "does not decode"},
	} {
		err := d.Kernel().CheckInput(tc.typ, tc.value)
		if !errors.Is(err, world.ErrMalformedInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckInput(%q): %v; want ErrMalformedInput mentioning %q", tc.typ, err, tc.want)
		}
	}
	if ran {
		t.Fatal("CheckInput ran a handler")
	}
	if got := d.Kernel().Types(); len(got) != 1 || got[0] != name {
		t.Fatalf("Types = %v", got)
	}
}
