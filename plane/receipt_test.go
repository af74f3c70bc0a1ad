package plane_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/vocab"
)

// TestUnreadableReceiptEndsItsEffectAndTheWorldGoesOn: a receipt whose
// payload the kernel cannot read (here an operator's Resolve with bytes
// that are not CBOR) still ends the effect it was delivered for: the host
// hands the kernel the intent the store filed it under, the world's
// receipt handler runs for that intent, the world no longer awaits it and
// keeps stepping, and its journal replays to the same state.
func TestUnreadableReceiptEndsItsEffectAndTheWorldGoesOn(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 3, Name: "unreadable-receipt"}, func(env *lab.Env) error {
		st := newStore(env)
		replies := plane.NewReplies()
		if err := createAssigned(env.Ctx, st, "w1", "A"); err != nil {
			return err
		}
		h, err := plane.StartHost(env.Ctx, env.Root, hostConfig("A", st, replies))
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab, Replies: replies, Hosts: []*plane.Host{h}})
		if err != nil {
			return err
		}
		if _, err := c.Send(env.Ctx, "w1", Pay{}, "pay"); err != nil {
			return err
		}
		var hash string
		if err := testrig.WaitLab(env, "the payment's intent", 10*time.Second, func() (bool, error) {
			items, err := st.ListEffects(env.Ctx, "w1", 0, 10)
			if len(items) == 1 {
				hash = items[0].IntentHash
			}
			return hash != "", err
		}); err != nil {
			return err
		}
		if _, _, err := st.Resolve(env.Ctx, hash, vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte{0xff, 0x00}}, "test"); err != nil {
			return err
		}
		if _, err := c.Send(env.Ctx, "w1", Add{By: 7, Key: "after"}, "after"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "the step after the receipt", 10*time.Second, func() (bool, error) {
			got, err := c.State(env.Ctx, "w1")
			if err != nil {
				return false, err
			}
			v, err := value(got, "w1")
			return v.N == 7, err
		}); err != nil {
			return err
		}
		s, err := parity(env.Ctx, st, "w1")
		if err != nil {
			return err
		}
		v, err := value(s, "w1")
		if err != nil {
			return err
		}
		if !slices.Equal(v.Receipts, []string{hash}) {
			return fmt.Errorf("receipts handled %v, want the payment's %s", v.Receipts, hash[:8])
		}
		inst, _, err := plane.Restore(env.Ctx, st, kernels(), "w1")
		if err != nil {
			return err
		}
		if aw := inst.Awaiting(); len(aw) != 0 {
			return fmt.Errorf("still awaiting %v", aw)
		}
		return nil
	})
}
