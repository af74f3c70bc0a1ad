// Package adapter runs effects: a Pool claims intents from the store's
// effect queue by kind, hands each to the Adapter that serves its kind,
// retries failures with backoff before any receipt exists (RetryPolicy:
// by default 1s doubling to 100s apart, without end, except that an
// http.request whose policy sets no attempt limit gives up after
// DefaultHTTPAttempts executions, some five minutes, and the world gets
// the last answer; each retry scheduled in the store by its clock, store
// RetryLater, so the schedule outlives the pool), and completes one typed
// receipt (ok, error or timeout, encoded with world.EncodeReceipt so the
// world reads the status in-band) into the world's inbox. It also holds
// the two built-in adapters: HTTP (http.request) and Fabric (fabric.send).
//
// Applications serve their own effect kinds by implementing effect.Adapter
// and registering it with the pool. An adapter speaks the effect
// vocabulary (package vocab: the EffectItem it is handed, the Result it
// answers, Permanent and Unknown for the failures of an attempt) and
// decodes its params with world.Decode; it never imports the store
// (examples/ledger/audit is one):
//
//	type emailAdapter struct{ smtp *Mailer }
//
//	func (emailAdapter) Kinds() []string { return []string{"email.send"} }
//
//	func (a emailAdapter) Execute(ctx context.Context, it vocab.EffectItem) (effect.Result, error) {
//		var m Email
//		if err := world.Decode(it.Params, &m); err != nil {
//			return effect.Result{}, effect.Permanent(err) // never servable: an error receipt at once
//		}
//		if err := a.smtp.Send(ctx, m, it.IntentHash); err != nil {
//			return effect.Result{}, effect.Unknown(err) // it may have been sent: retried, then a timeout
//		}
//		return effect.OK(nil), nil
//	}
//
// and, where the node or pool is built:
//
//	pool, err := adapter.NewPool(st, adapter.Config{Worker: "adapters-1", Executor: ex},
//		adapter.Register(adapter.NewHTTP(ex, adapter.HTTPConfig{}), adapter.RetryPolicy{}),
//		adapter.Register(adapter.NewFabric(st), adapter.RetryUntilKnown()),
//		adapter.Register(emailAdapter{smtp: mailer}, adapter.RetryPolicy{Attempts: 5, Base: time.Second,
//			NonRetryable: []string{"mailbox_unknown"}}),
//	)
//	ex.Go(func() { _ = pool.Run(ctx) })
//
// (a binary built on orrery.MainWith gives its adapters in orrery.App
// instead, and serve builds the pool). A handler may give one intent its
// own policy (world.WithRetry), which replaces its kind's. An adapter
// names a failure's class with effect.Classified, which a policy's
// NonRetryable lists. The http.request adapter sends the intent hash as
// the Idempotency-Key header on every attempt, so the server can
// deduplicate; an application's adapter should pass IntentHash on the same
// way (as emailAdapter does above).
//
// A receipt's status is a promise to the world: ok, the effect happened;
// error, it did not and will not happen; timeout, nobody knows. An
// adapter answers error only for a definite refusal (nothing was sent, or
// the other side answered that it did nothing). A failure after which the
// effect may have happened (a connection lost once the request was
// written, a store call whose answer was lost) is Unknown: retried, and a
// timeout receipt once retries are spent, or, for an effect that is safe
// to repeat, retried without end (RetryUntilKnown: the claim is released
// and taken again when its budget runs out) until the outcome is known, as
// fabric.send is. The pool keeps the same promise for what it writes
// itself: a result that cannot reach the world (over MaxReceiptBytes, the
// largest input a world's kernel reads, or not encodable) is delivered as
// a short receipt saying so, a timeout when the adapter had answered ok.
//
// Each execution is a claim of its own: a failed one that the policy
// retries is handed back to the store with its delay (RetryLater), and the
// store holds the effect, counting the failure (EffectItem.Failures), until
// that time by its clock; the pool learns how long to wait from the store
// (NextRetry), never by comparing the store's clock with its own.
//
// Delivery is at least once and completion exactly once: a claim that
// expires (a crash, a pause, an adapter that overruns) is requeued by the
// effect reaper and executed again under a new claim, and the store
// accepts one terminal receipt per intent; a pool whose claim was taken
// over, or whose effect an operator held (the hold revokes the claim),
// learns it (ErrClaimLost, or a duplicate completion) and drops its
// result, as it drops a result it holds once its claim has expired.
// Within one claim an effect is executed once; never by two goroutines of
// one pool.
//
// Stop is the planned stop: no new claim, the executions in flight finish
// and their receipts are delivered (so a completed call is not made again
// elsewhere), and what is still running when its context ends is
// cancelled and released at once (store ReleaseEffect) for another pool.
// Cancelling Run's context is a crash as far as the queue can tell: the
// claims in flight expire and the reaper requeues them.
//
// Config.Observe reports every completion attempt (status, duplicate,
// error, the dispatch latency from the intent's enqueue and the time spent
// in Execute) for metrics; Config.Tracer writes an orrery.effect span per
// claim, with the adapter's Execute calls under it, and an orrery.receipt
// span for its completion, linked to the world's cycles through
// Config.Links (a *plane.TraceLinks) within one process.
//
// What the package never does: read the machine's clock, sleep or start
// goroutines outside the actor.Executor it is given (so it runs in virtual
// time under the lab and testing/synctest); poll the queue on an interval
// (it parks until a TopicEffects hint, a freed slot, or the nearest expiry
// of a claim it holds); interpret world state; or write anything but
// receipts.
package adapter
