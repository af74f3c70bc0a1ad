package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// listPage is the page of the server's own reads through a worker's
// worlds.
const listPage = 1000

// workerWorlds pages through every world a worker holds or is assigned.
func (s *Server) workerWorlds(ctx context.Context, worker string) ([]store.WorkerWorld, error) {
	var out []store.WorkerWorld
	after := ""
	for {
		page, err := s.cfg.Store.ListWorkerWorlds(ctx, worker, after, listPage)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < listPage {
			return out, nil
		}
		after = page[len(page)-1].World
	}
}

func (s *Server) leases(r *http.Request, _ *reqCtx) (int, any, error) {
	q, err := query(r, "worker")
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	workers := []string{q.Get("worker")}
	if workers[0] == "" {
		ws, err := s.cfg.Store.ListWorkers(ctx)
		if err != nil {
			return 0, nil, err
		}
		workers = workers[:0]
		for _, w := range ws {
			workers = append(workers, w.ID)
		}
	} else if err := checkID("worker", workers[0]); err != nil {
		return 0, nil, err
	}
	out := []LeaseRow{}
	for _, worker := range workers {
		wws, err := s.workerWorlds(ctx, worker)
		if err != nil {
			return 0, nil, err
		}
		for _, ww := range wws {
			out = append(out, LeaseRow{Worker: worker, World: ww.World, Lease: leaseOf(ww.Lease), Assignment: assignmentOf(ww.Assignment)})
		}
	}
	return http.StatusOK, leasesResp{Leases: out}, nil
}

// effectNotFound names what a 404 on an effect path is about.
func effectNotFound(err error, hash string) error {
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("no effect %q", truncate(hash, 80)),
			Details: map[string]any{"resource": "effect"}}
	}
	return err
}

func (s *Server) retryEffect(r *http.Request, rc *reqCtx) (int, any, error) {
	var req reasonReq
	if err := s.body(r, rc, &req, true); err != nil {
		return 0, nil, err
	}
	hash := r.PathValue("hash")
	if err := checkID("intent hash", hash); err != nil {
		return 0, nil, err
	}
	es, err := s.cfg.Store.RetryEffect(r.Context(), hash, req.Reason)
	if err != nil {
		return 0, nil, effectNotFound(err, hash)
	}
	rc.world = es.World
	return http.StatusOK, effectStatusOf(es), nil
}

// holdEffect is POST /v1/effects/{hash}/hold: no adapter claims the
// effect until an operator releases or resolves it; an inflight one's
// claim is revoked.
func (s *Server) holdEffect(r *http.Request, rc *reqCtx) (int, any, error) {
	return s.effectOp(r, rc, s.cfg.Store.HoldEffect)
}

// releaseHeld is POST /v1/effects/{hash}/release: a held effect is
// pending again, to run at once.
func (s *Server) releaseHeld(r *http.Request, rc *reqCtx) (int, any, error) {
	return s.effectOp(r, rc, s.cfg.Store.ReleaseHeld)
}

// effectOp runs an operator's op on the effect the path names, with the
// body's reason, and answers its record.
func (s *Server) effectOp(r *http.Request, rc *reqCtx, op func(ctx context.Context, hash, reason string) (store.EffectStatus, error)) (int, any, error) {
	var req reasonReq
	if err := s.body(r, rc, &req, true); err != nil {
		return 0, nil, err
	}
	hash := r.PathValue("hash")
	if err := checkID("intent hash", hash); err != nil {
		return 0, nil, err
	}
	es, err := op(r.Context(), hash, req.Reason)
	if err != nil {
		return 0, nil, effectNotFound(err, hash)
	}
	rc.world = es.World
	return http.StatusOK, effectStatusOf(es), nil
}

// releaseAllHeld is POST /v1/effects/held/release: every held effect is
// released at once, as after a restore an operator has checked them all.
func (s *Server) releaseAllHeld(r *http.Request, rc *reqCtx) (int, any, error) {
	var req reasonReq
	if err := s.body(r, rc, &req, true); err != nil {
		return 0, nil, err
	}
	n, err := s.cfg.Store.ReleaseAllHeld(r.Context(), req.Reason)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, HeldCount{Released: n}, nil
}

func effectStatusOf(es store.EffectStatus) EffectStatus {
	return EffectStatus{
		IntentHash: es.IntentHash, World: es.World, Kind: es.Kind, State: string(es.State), Attempts: es.Attempts,
		Retries: es.Retries, RetryReason: es.RetryReason, CompletedAt: utc(es.CompletedAt),
		Failures: es.Failures, RetryAt: utc(es.RetryAt), LastError: es.LastError,
		HoldReason: es.HoldReason, HeldAt: utc(es.HeldAt), ReleaseReason: es.ReleaseReason,
	}
}

func (s *Server) injectReceipt(r *http.Request, rc *reqCtx) (int, any, error) {
	var req receiptReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	hash := r.PathValue("hash")
	if err := checkID("intent hash", hash); err != nil {
		return 0, nil, err
	}
	status := vocab.ReceiptStatus(req.Status)
	if !status.Valid() {
		return 0, nil, invalid(`"status" must be ok, error or timeout`)
	}
	if err := store.CheckReason("receipt", req.Reason); err != nil {
		return 0, nil, invalid(cleanMessage(describe(err)))
	}
	ctx := r.Context()
	es, err := s.cfg.Store.EffectStatus(ctx, hash)
	if err != nil {
		return 0, nil, effectNotFound(err, hash)
	}
	rc.world = es.World
	// The receipt is built exactly as the adapter pool builds one, so the
	// world cannot tell an operator's from an adapter's: the body is the
	// CBOR of the JSON (none for null), the status in-band, and the retry
	// the effect is at.
	var body []byte
	if len(req.Body) > 0 && string(req.Body) != "null" {
		if body, err = jsonToCBOR(req.Body); err != nil {
			return 0, nil, err
		}
	}
	payload, err := world.EncodeReceipt(world.Receipt{
		IntentHash: hash, Kind: es.Kind, Status: status, Body: body, Retry: uint64(es.Retries),
	})
	if err != nil {
		return 0, nil, err
	}
	seq, dup, err := s.cfg.Store.Resolve(ctx, hash, vocab.Receipt{Status: status, Payload: payload}, req.Reason)
	if err != nil {
		return 0, nil, effectNotFound(err, hash)
	}
	return http.StatusOK, ReceiptAck{Seq: seq, Duplicate: dup}, nil
}

// workerView is a worker's record with its liveness and world counts, by
// the store's clock now.
func (s *Server) workerView(ctx context.Context, w store.WorkerInfo, now time.Time) (Worker, error) {
	out := Worker{
		ID: w.ID, Capacity: w.Capacity, Draining: w.Draining, Live: s.live(w, now),
		HeartbeatAt: utc(w.HeartbeatAt), StartedAt: utc(w.StartedAt),
		Capabilities: slices.Clone(w.Capabilities), Roles: []string{},
	}
	if out.Capabilities == nil {
		out.Capabilities = []string{}
	}
	for _, r := range plane.Roles() {
		if plane.Runs(w, r) {
			out.Roles = append(out.Roles, r)
		}
	}
	out.Status = workerStatus(out.Live, out.Draining)
	wws, err := s.workerWorlds(ctx, w.ID)
	if err != nil {
		return Worker{}, err
	}
	for _, ww := range wws {
		if ww.World == plane.OrchestratorWorld {
			continue // the orchestrator's own lease: no world runs under it
		}
		if ww.Lease != nil && ww.Lease.Holder == w.ID && ww.Lease.ExpiresAt.After(now) {
			out.WorldsHeld++
		}
		if ww.Assignment != nil && ww.Assignment.DesiredWorker == w.ID {
			out.WorldsAssigned++
		}
	}
	return out, nil
}

func (s *Server) drain(r *http.Request, rc *reqCtx) (int, any, error) {
	var req drainReq
	if err := s.body(r, rc, &req, true); err != nil {
		return 0, nil, err
	}
	worker := r.PathValue("id")
	if err := checkID("worker", worker); err != nil {
		return 0, nil, err
	}
	draining := req.Draining == nil || *req.Draining
	ctx := r.Context()
	info, err := s.cfg.Store.SetDraining(ctx, worker, draining)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("no worker %q", truncate(worker, 80)),
			Details: map[string]any{"resource": "worker"}}
	}
	if err != nil {
		return 0, nil, err
	}
	now, err := s.cfg.Store.Now(ctx)
	if err != nil {
		return 0, nil, err
	}
	wv, err := s.workerView(ctx, info, now)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wv, nil
}

func (s *Server) queues(r *http.Request, _ *reqCtx) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	d, err := s.cfg.Store.QueueDepths(r.Context())
	if err != nil {
		return 0, nil, err
	}
	q := QueuesView{Queues: queuesOf(d)}
	if q.Workflow, err = s.workflowQueues(r.Context()); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, q, nil
}

func queuesOf(d store.QueueDepths) Queues {
	return Queues{
		EffectsPending: d.EffectsPending, EffectsInflight: d.EffectsInflight, EffectsHeld: d.EffectsHeld,
		TimersScheduled: d.TimersScheduled, TimersClaimed: d.TimersClaimed, InboxBacklog: d.InboxBacklog,
	}
}
