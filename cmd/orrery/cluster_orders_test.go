package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orrery-run/orrery"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/examples/orders"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// payURLEnv names the payment service the children's orders adapter
// posts to: set, the child serves examples/orders too.
const payURLEnv = "ORRERY_TEST_ORDERS_PAY_URL"

// payAdapter is the orders' payment adapter in a child: each charge or
// refund is a POST to the test's payment service (payTarget, which
// outlives every kill), its body "<kind> <key>" and its Idempotency-Key
// the payment's key.
type payAdapter struct{ url string }

func (payAdapter) Kinds() []string { return []string{orders.KindCharge, orders.KindRefund} }

func (a payAdapter) Execute(ctx context.Context, it vocab.EffectItem) (effect.Result, error) {
	var p orders.Payment
	if err := world.Decode(it.Params, &p); err != nil {
		return effect.Result{}, effect.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader([]byte(it.Kind+" "+p.Key)))
	if err != nil {
		return effect.Result{}, effect.Permanent(err)
	}
	req.Header.Set("Idempotency-Key", p.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return effect.Result{}, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return effect.Result{}, fmt.Errorf("payment service: %s", resp.Status)
	}
	return effect.OK(struct{}{}), nil
}

// withOrders adds examples/orders and its payment adapter to a child's app
// when the test named a payment service.
func withOrders(a orrery.App) orrery.App {
	url := os.Getenv(payURLEnv)
	if url == "" {
		return a
	}
	a.Workflows = append(a.Workflows, orders.Workflows(orders.PickAll)...)
	a.Adapters = append(a.Adapters, adapter.Register(payAdapter{url: url}, adapter.RetryPolicy{}))
	return a
}

// Orders survive kill -9: ten orders on one serve process on SQLite, which
// is killed twice (once while the orders charge, once while they wait for
// their shipment) and restarted on the same file. Every order ends once,
// completed, and the payment service saw each charge under one
// idempotency key only (it applies a key once).
func TestOrdersSurviveKillNineTwiceOnSQLite(t *testing.T) {
	pay := newPayTarget(t)
	t.Setenv(payURLEnv, pay.srv.URL)
	c := newClusterWith(t, nil, []string{filepath.Join(t.TempDir(), "orders.db")}, leaseTTL, nil)
	ordersSurvive(t, c, pay, 0, 0)
}

// The same on two nodes of one PostgreSQL database: each node is killed
// once (the first while the orders charge, the second while they wait),
// and the other carries on.
func TestOrdersSurviveKillNineOfEachNodeOnPostgreSQL(t *testing.T) {
	db := newClusterDB(t)
	pay := newPayTarget(t)
	t.Setenv(payURLEnv, pay.srv.URL)
	c := newCluster(t, db, db.dsn, 2)
	ordersSurvive(t, c, pay, 0, 1)
}

// ordersSurvive starts ten orders, kills the cluster's child first while
// they charge and child second while they wait for their shipment
// (restarting each), ships them, and checks every order ended once,
// completed, each charge under one idempotency key and no refund.
func ordersSurvive(t *testing.T, c *cluster, pay *payTarget, first, second int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	apiOf := func() *child {
		for _, p := range c.current() {
			if p.serves() {
				return p
			}
		}
		t.Fatal("no process serves")
		return nil
	}
	const n = 10
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("o-%d", i)
		o := orders.Order{ID: ids[i], Customer: "c", Amount: 10 + i, Lines: []orders.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}, {SKU: "c", Qty: 3}}}
		if _, _, err := apiOf().api.StartRun(ctx, orders.WorkflowFulfil, ids[i], o); err != nil {
			t.Fatal(err)
		}
	}
	charged := func() int {
		k := 0
		for _, id := range ids {
			if pay.seen(orders.KindCharge+" "+id+"/charge") > 0 {
				k++
			}
		}
		return k
	}
	if !poll(clusterBound, 5*time.Millisecond, func() bool { return charged() >= 1 }) {
		t.Fatalf("no order charged within %v:\n%s", clusterBound, apiOf().tail())
	}
	p := c.current()[first]
	c.kill(p) // the first kill -9: while the orders charge
	c.restart(p)
	stage := func(id string) string {
		v, err := apiOf().api.GetRun(ctx, id)
		if err != nil {
			return ""
		}
		var s string
		_ = json.Unmarshal(v.Values["stage"], &s)
		return s
	}
	if !poll(2*clusterBound, 20*time.Millisecond, func() bool {
		for _, id := range ids {
			if stage(id) != "awaiting shipment" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not every order awaits its shipment:\n%s", apiOf().tail())
	}
	ship := func(id string) {
		// A shipment repeated after the order ended is refused as
		// finished: the order took the first one.
		if err := apiOf().api.SignalRun(ctx, id, "shipped", orders.Shipment{Carrier: "ups"}, "ship-"+id); err != nil && !errors.Is(err, workflow.ErrFinished) {
			t.Fatalf("ship %s: %v", id, err)
		}
	}
	for _, id := range ids[:n/2] {
		ship(id)
	}
	p = c.current()[second]
	c.kill(p) // the second: with half the orders shipped, the rest waiting
	c.restart(p)
	for _, id := range ids { // again for the first half: the same keys
		ship(id)
	}
	if !poll(2*clusterBound, 20*time.Millisecond, func() bool {
		for _, id := range ids {
			if v, err := apiOf().api.GetRun(ctx, id); err != nil || v.Status != "completed" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not every order completed:\n%s", apiOf().tail())
	}
	for _, id := range ids {
		evs, err := apiOf().api.Audit(ctx, id, time.Unix(0, 0), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ends := 0
		for _, e := range evs {
			switch e.EventType {
			case "RunCompleted", "RunFailed", "RunCancelled":
				ends++
			}
		}
		if ends != 1 {
			t.Errorf("%s has %d terminal events", id, ends)
		}
		body := orders.KindCharge + " " + id + "/charge"
		pay.mu.Lock()
		keys := len(pay.idem[body])
		pay.mu.Unlock()
		if pay.seen(body) == 0 || keys != 1 {
			t.Errorf("%s: the payment service saw its charge %d times under %d keys, want one key", id, pay.seen(body), keys)
		}
		if refunds := pay.seen(orders.KindRefund + " " + id + "/refund"); refunds != 0 {
			t.Errorf("%s was refunded %d times", id, refunds)
		}
	}
}
