package world

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/handlers"
	"github.com/orrery-run/orrery/vocab"
)

// Def is a world definition: a name and version (the journal's planId and
// planVersion), the state type S, one handler per input type and the
// effect kinds its handlers may emit. Build it with New, On and EffectKind
// before its first use; after that it is read-only and safe for
// concurrent use by any number of worlds.
//
// Building never panics. A mistake (a duplicate handler, a type with no
// stable name) is kept and reported by Err, and every Step or Replay on the
// definition fails with it, so a broken definition cannot run.
type Def[S any] struct {
	name    string
	version uint64
	table   *handlers.Table[handler[S]]
	effects map[string]reflect.Type // effect kind → its params type
	dec     *event.Decoder          // inputs: event's limits, unknown fields rejected
	// stateDec reads states the kernel wrote itself. Its limits are far
	// wider than an input's: encoding a state has none, and a world whose
	// state it could not read back would be stuck forever.
	stateDec *event.Decoder
	errs     []error
	freeze   sync.Once
}

// handler decodes an input value and returns the call to make with it, so
// that a value that does not decode is told apart from a handler's error.
type handler[S any] func(value []byte) (func(*Ctx, *S) error, error)

// Built-in effect kinds. Timers and fabric sends have Ctx methods of their
// own; http.request is an ordinary kind whose params are HTTPRequest.
const (
	KindHTTPRequest = "http.request"
	KindFabricSend  = "fabric.send"
	KindTimerSet    = "timer.set"
	KindTimerCancel = "timer.cancel"
)

// New starts the definition of a world named name at version. The name and
// version go into every journal record, and replay refuses records of
// another version: bump it when a handler changes what it does.
func New[S any](name string, version uint64) *Def[S] {
	dec, err := event.NewDecoder(event.DecoderOptions{MaxSize: MaxInputBytes, DisallowUnknownFields: true})
	stateDec, serr := event.NewDecoder(event.DecoderOptions{
		MaxSize: math.MaxInt32, MaxDepth: 1024, MaxElements: event.MaxMaxElements})
	d := &Def[S]{
		name:    name,
		version: version,
		table:   handlers.NewTable[handler[S]](),
		effects: map[string]reflect.Type{
			KindHTTPRequest: reflect.TypeFor[HTTPRequest](),
			KindFabricSend:  reflect.TypeFor[FabricSendParams](),
		},
		dec:      dec,
		stateDec: stateDec,
	}
	switch {
	case err != nil || serr != nil:
		d.fail("New", name, errors.Join(err, serr))
	case name == "" || !utf8.ValidString(name):
		d.fail("New", name, errors.New("a world name is non-empty UTF-8"))
	case !storableID(name):
		// It is every record's planId: one the store refuses would
		// refuse every step.
		d.fail("New", name, fmt.Errorf("a world name has no NUL and at most %d bytes", event.MaxIDBytes))
	case version == 0:
		d.fail("New", name, errors.New("versions start at 1"))
	}
	return d
}

// On makes h the handler of inputs of type M. The input type's name is M's
// Go type as %T prints it ("bank.Deposit"), or what M's WorldType method
// returns: declare one to keep the name when the type moves or is renamed,
// since the name is written into inboxes and the journal. M must be a named,
// non-pointer, non-interface type. Receipts of effects arrive as Receipt.
func On[S, M any](d *Def[S], h func(c *Ctx, s *S, m M) error) {
	var zero M
	name, err := typeName(reflect.TypeFor[M](), zero)
	if err != nil {
		d.fail("On", reflect.TypeFor[M]().String(), err)
		return
	}
	if strings.HasPrefix(name, sysPrefix) && name != ReceiptType {
		d.fail("On", name, errors.New(`the "sys/" prefix is reserved`))
		return
	}
	if h == nil {
		d.fail("On", name, handlers.ErrNilHandler)
		return
	}
	dec := d.dec
	err = d.table.Register(name, func(value []byte) (func(*Ctx, *S) error, error) {
		var m M
		if err := dec.Unmarshal(value, &m); err != nil {
			return nil, err
		}
		return func(c *Ctx, s *S) error { return h(c, s, m) }, nil
	})
	if err != nil {
		d.fail("On", name, err)
	}
}

// EffectKind lets the world's handlers emit effects of kind with params of
// type P (Ctx.Effect checks it). The adapter serving kind is registered
// with the plane, not here: the kernel only names what it asks for.
func EffectKind[P, S any](d *Def[S], kind string) {
	t := reflect.TypeFor[P]()
	switch _, dup := d.effects[kind]; {
	case kind == "" || !utf8.ValidString(kind):
		d.fail("EffectKind", kind, errors.New("an effect kind is non-empty UTF-8"))
	case !storableID(kind):
		d.fail("EffectKind", kind, fmt.Errorf("an effect kind has no NUL and at most %d bytes", event.MaxIDBytes))
	case kind == KindTimerSet || kind == KindTimerCancel || strings.HasPrefix(kind, sysPrefix):
		d.fail("EffectKind", kind, errors.New("reserved kind"))
	case dup:
		d.fail("EffectKind", kind, errors.New("kind already registered"))
	case t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface:
		d.fail("EffectKind", kind, errors.New("params are a concrete non-pointer type"))
	case d.table.Frozen():
		d.fail("EffectKind", kind, handlers.ErrRegisterAfterStart)
	default:
		d.effects[kind] = t
	}
}

// CheckInput reports whether an input of type typeName carrying value (its
// CBOR) would reach a handler: the definition handles the type, and the
// value decodes into the handler's Go type under the kernel's limits. It
// runs nothing. The plane checks external input with it before enqueueing,
// so a client that names no handler, or sends a value of the wrong shape,
// is told at once instead of finding an error outcome in the journal.
// Failures are *InputError (ErrMalformedInput).
func (d *Def[S]) CheckInput(typeName string, value []byte) error {
	if err := d.ready(); err != nil {
		return err
	}
	h, ok := d.table.Resolve(typeName)
	if !ok || strings.HasPrefix(typeName, sysPrefix) {
		var handled []string
		for _, t := range d.Types() {
			if !strings.HasPrefix(t, sysPrefix) {
				handled = append(handled, t)
			}
		}
		return &InputError{Kind: vocab.KindEvent, Reason: fmt.Sprintf("no handler for type %q (this world handles %s)",
			typeName, strings.Join(handled, ", "))}
	}
	if _, err := h(value); err != nil {
		return &InputError{Kind: vocab.KindEvent, Reason: fmt.Sprintf("the value does not decode as %q", typeName), Err: err}
	}
	return nil
}

// Name and Version identify the definition (planId and planVersion).
func (d *Def[S]) Name() string { return d.name }

// Version is the definition's version.
func (d *Def[S]) Version() uint64 { return d.version }

// Types returns the input types that have a handler, sorted.
func (d *Def[S]) Types() []string { return d.table.Types() }

// Err returns every mistake made while building the definition (joined,
// each a *DefError), or nil.
func (d *Def[S]) Err() error { return errors.Join(d.errs...) }

func (d *Def[S]) fail(op, name string, err error) {
	d.errs = append(d.errs, &DefError{Op: op, Name: name, Err: err})
}

// ready ends the setup phase and reports a broken definition.
func (d *Def[S]) ready() error {
	d.freeze.Do(d.table.Freeze)
	if len(d.errs) > 0 {
		return d.Err()
	}
	return nil
}

const sysPrefix = "sys/"

// storableID reports whether s is an identifier every store keeps.
func storableID(s string) bool { return len(s) <= event.MaxIDBytes && !strings.ContainsRune(s, 0) }

// Typed is implemented by input types that name themselves. The name must
// be a constant: it is how the journal and the inboxes refer to the type.
type Typed interface{ WorldType() string }

// typeName is the routing name of values of type t; v is one of them (a
// zero value will do), for its WorldType method.
func typeName(t reflect.Type, v any) (string, error) {
	if t == nil {
		return "", errors.New("nil has no type")
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		return "", errors.New("an input type is a named non-pointer, non-interface type")
	}
	if n, ok := v.(Typed); ok {
		name := n.WorldType()
		if name == "" || !utf8.ValidString(name) {
			return "", errors.New("WorldType returned an empty or invalid name")
		}
		return name, nil
	}
	if t.Name() == "" || t.PkgPath() == "" {
		return "", errors.New("unnamed and predeclared types need a WorldType method")
	}
	return t.String(), nil
}

// TypeName returns the input type name the kernel routes v by.
func TypeName(v any) (string, error) { return typeName(reflect.TypeOf(v), v) }
