package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/workflow"
)

type payIn struct {
	Account string
	Amount  int64
}

func payDef() *workflow.Def[payIn, string] {
	return workflow.New("pay", 1, func(c *workflow.Ctx, in payIn) (string, error) {
		return workflow.Step(c, "fmt", func(context.Context) (string, error) {
			return fmt.Sprintf("%s:%d", in.Account, in.Amount), nil
		})
	})
}

// TestStartCBORDecodesIntoTheInputType starts a run from generic CBOR (a map
// with string keys, as an API builds from JSON), and checks the function saw
// the typed input, that a repeat is the same run, and that the same run id
// started with the typed Start and the same value is that run too.
func TestStartCBORDecodesIntoTheInputType(t *testing.T) {
	onMemstore(t, 1, func(r *rig) error {
		def := payDef()
		_, w, cl, err := r.serve("w1", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		raw, err := event.Marshal(map[string]any{"Account": "alice", "Amount": int64(50)})
		if err != nil {
			return err
		}
		created, err := cl.StartCBOR(r.Ctx, "pay", "p-1", raw)
		if err != nil || !created {
			return fmt.Errorf("first start: created %v, %v", created, err)
		}
		created, err = cl.StartCBOR(r.Ctx, "pay", "p-1", raw)
		if err != nil || created {
			return fmt.Errorf("repeated start: created %v, %v", created, err)
		}
		if err := def.Start(r.Ctx, cl, "p-1", payIn{Account: "alice", Amount: 50}); err != nil {
			return fmt.Errorf("typed start of the same input: %w", err)
		}
		other, err := event.Marshal(map[string]any{"Account": "bob", "Amount": int64(50)})
		if err != nil {
			return err
		}
		if _, err := cl.StartCBOR(r.Ctx, "pay", "p-1", other); !errors.Is(err, workflow.ErrConflict) {
			return fmt.Errorf("start with other input: %v, want ErrConflict", err)
		}
		got, err := def.Result(r.Ctx, cl, "p-1")
		if err != nil {
			return err
		}
		if got != "alice:50" {
			return fmt.Errorf("result %q, want alice:50", got)
		}
		return nil
	})
}

func TestStartCBORRefusesABadShape(t *testing.T) {
	onMemstore(t, 1, func(r *rig) error {
		_, cl, err := r.clientFor(payDef())
		if err != nil {
			return err
		}
		for _, c := range []struct {
			name string
			v    any
		}{
			{"unknown field", map[string]any{"Account": "a", "Amount": int64(1), "Extra": true}},
			{"wrong type", map[string]any{"Account": int64(3), "Amount": int64(1)}},
			{"not a map", "alice"},
		} {
			name := c.name
			raw, err := event.Marshal(c.v)
			if err != nil {
				return err
			}
			if _, err := cl.StartCBOR(r.Ctx, "pay", "bad", raw); !errors.Is(err, workflow.ErrInvalid) {
				return fmt.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if _, err := cl.StartCBOR(r.Ctx, "pay", "bad", []byte{0xff}); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("malformed CBOR: %v, want ErrInvalid", err)
		}
		if _, err := cl.StartCBOR(r.Ctx, "nope", "bad", []byte{0xf6}); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("unknown workflow: %v, want ErrInvalid", err)
		}
		if _, err := cl.Get(r.Ctx, "bad"); !errors.Is(err, workflow.ErrNotFound) {
			return fmt.Errorf("a refused start left a run behind: %v", err)
		}
		return nil
	})
}
