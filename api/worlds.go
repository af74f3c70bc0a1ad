package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// body reads and strictly decodes the request body into v.
func (s *Server) body(r *http.Request, rc *reqCtx, v any, optional bool) error {
	b, err := readBody(rc.w, r, s.cfg.MaxBody)
	if err != nil {
		return err
	}
	return decodeStrict(b, v, optional)
}

// query returns r's query parameters, refusing names outside allowed and
// repeated names: a misspelt filter must not silently list everything.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	return queryRepeating(r, nil, allowed...)
}

// queryRepeating is query where the parameters in repeating may be given
// more than once.
func queryRepeating(r *http.Request, repeating []string, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, invalid("the query string is malformed")
	}
	for _, k := range sortedKeys(q) {
		if !slices.Contains(allowed, k) && !slices.Contains(repeating, k) {
			return nil, invalid(fmt.Sprintf("unknown query parameter %q", truncate(k, 64)))
		}
		if len(q[k]) > 1 && !slices.Contains(repeating, k) {
			return nil, invalid(fmt.Sprintf("query parameter %q is repeated", k))
		}
	}
	return q, nil
}

// uintParam reads an optional non-negative integer parameter.
func uintParam(q url.Values, name string, def uint64) (uint64, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, invalid(fmt.Sprintf("query parameter %q must be a non-negative integer", name))
	}
	return v, nil
}

// limitParam reads a page size: default def, at most max.
func limitParam(q url.Values, def, max int) (int, error) {
	v, err := uintParam(q, "limit", uint64(def))
	if err != nil {
		return 0, err
	}
	if v == 0 || v > uint64(max) {
		return 0, invalid(fmt.Sprintf("query parameter \"limit\" must be between 1 and %d", max))
	}
	return int(v), nil
}

// checkID refuses an identifier the store would refuse, before anything
// is read or written.
func checkID(what, id string) error {
	if err := store.CheckID("api", what, id); err != nil {
		return invalid(cleanMessage(describe(err)))
	}
	return nil
}

// checkNewWorldID checks the id of a world a client creates: a run is a
// world, so an id in the schedules' run namespace would take a tick's run
// id first (its start would then fail on the taken id and the tick never
// happen).
func checkNewWorldID(what, id string) error {
	if err := checkID(what, id); err != nil {
		return err
	}
	if strings.HasPrefix(id, store.ScheduleRunPrefix) {
		return invalid(fmt.Sprintf("%s %q: ids starting %q are reserved for schedules' runs", what, truncate(id, 128), store.ScheduleRunPrefix))
	}
	return nil
}

func (s *Server) createWorld(r *http.Request, rc *reqCtx) (int, any, error) {
	var req createWorldReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	rc.world = req.ID
	if err := checkNewWorldID("world", req.ID); err != nil {
		return 0, nil, err
	}
	if err := checkID("universe", req.Universe); err != nil {
		return 0, nil, err
	}
	if _, ok := s.cfg.Kernels[req.Universe]; !ok {
		return 0, nil, unknownUniverse(req.Universe, s.cfg.Kernels)
	}
	rec, err := s.cfg.Store.CreateWorld(r.Context(), req.Universe, req.ID, nil)
	if errors.Is(err, store.ErrWorldExists) {
		prev, gerr := s.cfg.Store.GetWorld(r.Context(), req.ID)
		if gerr == nil && prev.Universe == req.Universe {
			return http.StatusOK, worldOf(prev), nil
		}
		if gerr == nil {
			return 0, nil, apiErr(http.StatusConflict, CodeAlreadyExists,
				fmt.Sprintf("world %q exists in universe %q", req.ID, prev.Universe))
		}
		return 0, nil, err
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, worldOf(rec), nil
}

// worldRecords lists the worlds of universe ("": every universe the
// server hosts) with status ("": any), sorted by id.
func (s *Server) worldRecords(ctx context.Context, universe string, status store.WorldStatus) ([]store.World, error) {
	universes := []string{universe}
	if universe == "" {
		universes = sortedKeys(s.cfg.Kernels)
	}
	var out []store.World
	for _, u := range universes {
		ws, err := s.cfg.Store.ListWorlds(ctx, u, status)
		if err != nil {
			return nil, err
		}
		out = append(out, ws...)
	}
	slices.SortFunc(out, func(a, b store.World) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (s *Server) getWorld(r *http.Request, rc *reqCtx) (int, any, error) {
	if err := checkID("world", rc.world); err != nil {
		return 0, nil, err
	}
	rec, err := s.cfg.Store.GetWorld(r.Context(), rc.world)
	if err != nil {
		return 0, nil, err
	}
	v, err := s.worldView(r.Context(), rec)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, v, nil
}

// worldView is a world's record with what runs it: its lease,
// assignment, journal head, inbox cursor and inbox depth.
func (s *Server) worldView(ctx context.Context, rec store.World) (WorldView, error) {
	st := s.cfg.Store
	v := WorldView{World: worldOf(rec)}
	if l, ok, err := st.GetLease(ctx, rec.ID); err != nil {
		return WorldView{}, err
	} else if ok {
		v.Lease = leaseOf(&l)
	}
	if a, ok, err := st.GetAssignment(ctx, rec.ID); err != nil {
		return WorldView{}, err
	} else if ok {
		v.Assignment = assignmentOf(&a)
	}
	var err error
	if v.Head, err = st.Head(ctx, rec.ID); err != nil {
		return WorldView{}, err
	}
	if v.JournalFloor, err = st.Floor(ctx, rec.ID); err != nil {
		return WorldView{}, err
	}
	if v.Version, err = plane.WorldVersion(ctx, st, rec.ID); err != nil {
		return WorldView{}, err
	}
	c, err := st.Cursor(ctx, rec.ID)
	if err != nil {
		return v, nil // a world without an inbox record yet: no cursor, nothing queued
	}
	v.InboxCursor = &c
	// The items are counted, not their seqs subtracted: the store promises
	// seqs that increase, not seqs without gaps.
	items, err := st.ReadInbox(ctx, rec.ID, c, MaxInboxDepth+1)
	if err != nil {
		return WorldView{}, err
	}
	v.InboxDepth = min(len(items), MaxInboxDepth)
	for _, it := range items {
		if it.Kind == vocab.KindUpgrade && v.PendingUpgrade == 0 {
			if to, _, err := plane.PendingUpgrade(ctx, st, rec.ID); err == nil {
				v.PendingUpgrade = to
			}
		}
	}
	v.InboxDepthMore = len(items) > MaxInboxDepth
	return v, nil
}

// oneOf checks that an input names its value one way: a type (with a JSON
// value) or a complete wire payload.
func oneOf(typ string, value []byte, payload []byte) error {
	hasValue := len(value) > 0 && string(value) != "null"
	switch {
	case typ != "" && len(payload) > 0:
		return invalid(`give either "type" (with "value") or "payload", not both`)
	case typ == "" && len(payload) == 0:
		return invalid(`"type" or "payload" is required`)
	case len(payload) > 0 && hasValue:
		return invalid(`"value" goes with "type"; a "payload" carries its own value`)
	}
	return nil
}

// sendEvent hands the event to the plane as it came: a type and value by
// its parts (the plane encodes the payload once and never decodes it), a
// wire payload as bytes (the plane decodes it once). The world id and the
// idempotency key are the store's to check, once, when it enqueues (the
// plane judges an id only once no world has it): their refusals come back
// as the same 400 invalid_argument.
func (s *Server) sendEvent(r *http.Request, rc *reqCtx) (int, any, error) {
	var req eventReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	if err := oneOf(req.Type, req.Value, req.Payload); err != nil {
		return 0, nil, err
	}
	var (
		ack plane.Ack
		err error
	)
	if req.Type != "" {
		value, verr := jsonToCBOR(req.Value)
		if verr != nil {
			return 0, nil, verr
		}
		ack, err = s.cfg.Ops.EnqueueEvent(r.Context(), rc.world, req.Type, value, req.IdempotencyKey)
		if e, ok := inputMismatch(err, req.Type, req.Value); ok {
			return 0, nil, e
		}
	} else {
		ack, err = s.cfg.Ops.EnqueueIngress(r.Context(), rc.world, plane.Ingress{Kind: vocab.KindEvent, Payload: req.Payload, DedupeKey: req.IdempotencyKey})
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, Ack{Seq: ack.Seq, Duplicate: ack.Duplicate}, nil
}

// namedValue is a call's value as plane.Client.CallWithID takes it: a
// value whose input type is the request's (world.Typed) and whose CBOR is
// the request's, so the call payload the client builds is exactly
// world.EncodeCallNamed's.
type namedValue struct {
	typ   string
	value []byte // canonical CBOR
}

func (n namedValue) WorldType() string            { return n.typ }
func (n namedValue) MarshalCBOR() ([]byte, error) { return n.value, nil }

// callMessage is the part of a call's wire payload the server reads back
// to hand the call to the plane's client.
type callMessage struct {
	Type   string          `cbor:"type"`
	Value  cbor.RawMessage `cbor:"value"`
	CallID string          `cbor:"call_id"`
}

func (s *Server) call(r *http.Request, rc *reqCtx) (int, any, error) {
	var req callReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	if err := checkID("world", rc.world); err != nil {
		return 0, nil, err
	}
	if err := oneOf(req.Type, req.Value, req.Payload); err != nil {
		return 0, nil, err
	}
	timeout := s.cfg.CallTimeout
	switch {
	case req.TimeoutMs < 0:
		return 0, nil, invalid(`"timeout_ms" must not be negative`)
	case req.TimeoutMs > 0 && req.TimeoutMs < timeout.Milliseconds():
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	v, callID, err := s.callValue(req)
	if err != nil {
		return 0, nil, err
	}
	if err := store.CheckIngress("call", store.InboxItem{Kind: vocab.KindCall, DedupeKey: plane.CallKey(callID)}); err != nil {
		return 0, nil, invalid(`"call_id" is not usable: ` + cleanMessage(describe(err)))
	}
	// A call to a world that cannot run now would only wait out its
	// timeout: say why at once, and enqueue nothing.
	rec, err := s.cfg.Store.GetWorld(r.Context(), rc.world)
	if err != nil {
		return 0, nil, err
	}
	switch rec.Status {
	case store.WorldPaused:
		return 0, nil, apiErr(http.StatusConflict, CodePaused, fmt.Sprintf("world %q is paused: a call would wait until it resumes", rc.world))
	case store.WorldArchived:
		return 0, nil, apiErr(http.StatusConflict, CodeArchived, fmt.Sprintf("world %q is archived", rc.world))
	}
	if err := s.checkCallInput(rec, v, req.Value); err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	call := s.cfg.Client.CallWithID
	if req.CallID == "" && len(req.Payload) == 0 {
		call = s.cfg.Client.CallNew // the id was drawn here: no retry of it exists
	}
	reply, err := call(ctx, rc.world, callID, v)
	if err != nil {
		details := map[string]any{"call_id": callID}
		var pe *plane.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			return 0, nil, &Error{Status: http.StatusGatewayTimeout, Code: CodeTimeout, Details: details,
				Message: fmt.Sprintf("no reply within %v; call again with the same call_id to keep waiting for it", timeout)}
		case errors.Is(err, plane.ErrCallFailed) && errors.As(err, &pe) && pe.Err != nil:
			return 0, nil, &Error{Status: http.StatusUnprocessableEntity, Code: CodeCallFailed, Details: details,
				Message: cleanMessage(pe.Err.Error())}
		}
		return 0, nil, err
	}
	js, err := cborToJSON(reply)
	if err != nil {
		return 0, nil, fmt.Errorf("api: reply of call %s: %w", callID, err)
	}
	return http.StatusOK, CallResult{CallID: callID, Reply: js, ReplyCBOR: reply}, nil
}

// callValue builds the call's value and id from a request, checked as the
// plane checks any ingress before it is enqueued.
func (s *Server) callValue(req callReq) (namedValue, string, error) {
	if len(req.Payload) > 0 {
		if err := s.cfg.Ops.ValidateIngress(vocab.KindCall, req.Payload); err != nil {
			return namedValue{}, "", invalid("invalid call payload: " + cleanMessage(err.Error()))
		}
		var m callMessage
		if err := event.Unmarshal(req.Payload, &m); err != nil {
			return namedValue{}, "", invalid("invalid call payload: " + cleanMessage(err.Error()))
		}
		if req.CallID != "" && req.CallID != m.CallID {
			return namedValue{}, "", invalid(`"call_id" differs from the payload's call id`)
		}
		value, err := event.Canonicalize(m.Value)
		if err != nil {
			return namedValue{}, "", invalid("invalid call payload: " + cleanMessage(err.Error()))
		}
		return namedValue{typ: m.Type, value: value}, m.CallID, nil
	}
	callID := req.CallID
	if callID == "" {
		callID = s.cfg.Client.NewCallID()
	}
	value, err := jsonToCBOR(req.Value)
	if err != nil {
		return namedValue{}, "", err
	}
	payload, err := world.EncodeCallNamed(callID, req.Type, cbor.RawMessage(value))
	if err != nil {
		return namedValue{}, "", err
	}
	if err := s.cfg.Ops.ValidateIngress(vocab.KindCall, payload); err != nil {
		return namedValue{}, "", invalid("invalid call: " + cleanMessage(err.Error()))
	}
	return namedValue{typ: req.Type, value: value}, callID, nil
}

// image is the part of a world's state bytes that is the user's state.
type image struct {
	State cbor.RawMessage `cbor:"state"`
}

func (s *Server) state(r *http.Request, rc *reqCtx) (int, any, error) {
	q, err := query(r, "height")
	if err != nil {
		return 0, nil, err
	}
	height, at, err := heightParam(q)
	if err != nil {
		return 0, nil, err
	}
	if err := checkID("world", rc.world); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	if at {
		st, err := s.stateAt(ctx, rc.world, height)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, st, nil
	}
	snap, err := s.cfg.Client.State(ctx, rc.world)
	if err != nil {
		return 0, nil, err
	}
	// An in-process host publishes its state just after its commit
	// returns, so a caller who has already seen that commit (a call's
	// reply read back from the journal) could get the state before it.
	// The journal's head says so; the state then comes from the store.
	if head, err := s.cfg.Store.Head(ctx, rc.world); err == nil && head > snap.Height {
		inst, _, err := plane.Restore(ctx, s.cfg.Store, s.cfg.Kernels, rc.world)
		if err != nil {
			return 0, nil, err
		}
		snap = inst.Snapshot()
	}
	st, err := stateOf(rc.world, snap)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, st, nil
}

func (s *Server) fork(r *http.Request, rc *reqCtx) (int, any, error) {
	var req forkReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	if err := checkID("world", rc.world); err != nil {
		return 0, nil, err
	}
	if err := checkNewWorldID("id", req.ID); err != nil {
		return 0, nil, err
	}
	if err := store.CheckInt("fork", "height", req.Height); err != nil {
		return 0, nil, invalid(cleanMessage(describe(err)))
	}
	ctx := r.Context()
	if _, err := s.cfg.Store.GetWorld(ctx, rc.world); err != nil {
		return 0, nil, err
	}
	_, gerr := s.cfg.Store.GetWorld(ctx, req.ID)
	existed := gerr == nil
	rec, err := s.cfg.Ops.WorldFork(ctx, rc.world, req.Height, req.ID)
	if err != nil {
		return 0, nil, err
	}
	if existed {
		return http.StatusOK, worldOf(rec), nil
	}
	return http.StatusCreated, worldOf(rec), nil
}

// upgradeWorld answers POST /v1/worlds/{id}/upgrade (plane.Ops.UpgradeWorld).
func (s *Server) upgradeWorld(r *http.Request, rc *reqCtx) (int, any, error) {
	var req upgradeReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	if err := checkID("world", rc.world); err != nil {
		return 0, nil, err
	}
	if req.To == 0 || req.After != "" || req.Limit != 0 {
		return 0, nil, invalid(`"to" is a version (from 1); "after" and "limit" page a universe's worlds`)
	}
	u, err := s.cfg.Ops.UpgradeWorld(r.Context(), rc.world, req.To)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, WorldUpgrade{World: u.World, From: u.From, To: u.To, Status: u.Status, Seq: u.Seq}, nil
}

// upgradeUniverse answers POST /v1/universes/{universe}/upgrade: a page of
// the universe's worlds (plane.Ops.UpgradeUniverse).
func (s *Server) upgradeUniverse(r *http.Request, rc *reqCtx) (int, any, error) {
	var req upgradeReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	universe := r.PathValue("universe")
	if err := checkID("universe", universe); err != nil {
		return 0, nil, err
	}
	if req.To == 0 || req.Limit < 0 || req.Limit > maxUpgradePage {
		return 0, nil, invalid(fmt.Sprintf(`"to" is a version (from 1); "limit" is 0 to %d`, maxUpgradePage))
	}
	if _, ok := s.cfg.Kernels[universe]; !ok {
		return 0, nil, unknownUniverse(universe, s.cfg.Kernels)
	}
	u, err := s.cfg.Ops.UpgradeUniverse(r.Context(), universe, req.To, req.After, req.Limit)
	if err != nil {
		return 0, nil, err
	}
	out := UniverseUpgrade{Asked: u.Asked, Already: u.Already, Failed: u.Failed, Failures: []UpgradeFailure{}, Next: u.Next}
	for _, id := range slices.Sorted(maps.Keys(u.Failures)) {
		e := toError(u.Failures[id])
		out.Failures = append(out.Failures, UpgradeFailure{World: id, Code: e.Code, Error: e.Message})
	}
	return http.StatusOK, out, nil
}

// maxUpgradePage bounds a page of a universe upgrade.
const maxUpgradePage = 1000

func (s *Server) setStatus(status store.WorldStatus) handlerFunc {
	return func(r *http.Request, rc *reqCtx) (int, any, error) {
		var req reasonReq
		if err := s.body(r, rc, &req, true); err != nil {
			return 0, nil, err
		}
		if err := checkID("world", rc.world); err != nil {
			return 0, nil, err
		}
		rec, err := s.cfg.Store.SetWorldStatus(r.Context(), rc.world, status, req.Reason)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, worldOf(rec), nil
	}
}

// stepRecord is the payload of a world's journal record, as package
// world documents it ("Journal records"): the fields the journal view
// shows.
type stepRecord struct {
	V     uint64 `cbor:"v"`
	Input struct {
		Seq        uint64          `cbor:"seq"`
		Kind       string          `cbor:"kind"`
		EnqueuedAt event.Timestamp `cbor:"enqueued_at"`
		Type       string          `cbor:"type"`
		CallID     string          `cbor:"call_id"`
	} `cbor:"input"`
	Outcome   string `cbor:"outcome"`
	Error     string `cbor:"error"`
	StateHash string `cbor:"state_hash"`
}

func recordOf(e event.Envelope) Record {
	out := Record{Height: e.RunSeq, EventID: e.EventID, EventType: e.EventType, PersistedAt: utc(e.PersistedAt), StepID: e.StepID}
	if e.EventType != world.EventWorldStepped && e.EventType != world.EventWorldUpgraded {
		return out
	}
	var sr stepRecord // an upgrade's record has these fields too
	if err := stateDecoder.Unmarshal(e.Payload, &sr); err != nil {
		return out
	}
	out.Input = &RecordInput{Seq: sr.Input.Seq, Kind: sr.Input.Kind, Type: sr.Input.Type, EnqueuedAt: utc(sr.Input.EnqueuedAt.Time)}
	out.Outcome, out.Error, out.StateHash, out.CallID = sr.Outcome, sr.Error, sr.StateHash, sr.Input.CallID
	return out
}

// Journal long-poll backoff: the records a wait is for appear when a host
// commits, which raises no hint, so the wait re-reads on a doubling
// backoff, reset by the world's inbox hints (input that a commit will
// soon journal).
const (
	journalPollMin = 5 * time.Millisecond
	journalPollMax = 250 * time.Millisecond
)

func (s *Server) journal(r *http.Request, rc *reqCtx) (int, any, error) {
	q, err := query(r, "after", "limit", "wait_ms", "detail")
	if err != nil {
		return 0, nil, err
	}
	detail, err := boolParam(q, "detail")
	if err != nil {
		return 0, nil, err
	}
	after, err := uintParam(q, "after", 0)
	if err != nil {
		return 0, nil, err
	}
	limit, err := limitParam(q, 100, 1000)
	if err != nil {
		return 0, nil, err
	}
	waitMs, err := uintParam(q, "wait_ms", 0)
	if err != nil {
		return 0, nil, err
	}
	wait := s.cfg.JournalWaitMax
	if waitMs < uint64(wait/time.Millisecond) {
		wait = time.Duration(waitMs) * time.Millisecond
	}
	if err := checkID("world", rc.world); err != nil {
		return 0, nil, err
	}
	if err := store.CheckInt("journal", "after", after); err != nil {
		return 0, nil, invalid(cleanMessage(describe(err)))
	}
	ctx, st := r.Context(), s.cfg.Store
	if _, err := st.GetWorld(ctx, rc.world); err != nil {
		return 0, nil, err
	}
	recs, err := st.Read(ctx, rc.world, after, limit)
	if err != nil {
		return 0, nil, err
	}
	if len(recs) == 0 && wait > 0 {
		if recs, err = s.waitJournal(ctx, rc.world, after, limit, wait); err != nil {
			return 0, nil, err
		}
	}
	page := JournalPage{Records: make([]Record, 0, len(recs)), Next: after}
	for _, e := range recs {
		page.Records = append(page.Records, recordOf(e))
		page.Next = e.RunSeq
	}
	if detail {
		s.detailRecords(ctx, rc.world, recs, page.Records)
	}
	return http.StatusOK, page, nil
}

// waitJournal re-reads the journal after `after` until a record is there
// or wait has passed (then it answers none).
func (s *Server) waitJournal(ctx context.Context, id string, after uint64, limit int, wait time.Duration) ([]event.Envelope, error) {
	st := s.cfg.Store
	sig := store.NewSignal()
	if stop, err := st.Watch(ctx, sig, store.TopicInbox(id)); err == nil {
		defer stop()
	} // without a watch the backoff alone still finds the records
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	delay := journalPollMin
	for {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-deadline.C:
			t.Stop()
			return nil, nil
		case <-sig.C:
			delay = journalPollMin
		case <-t.C:
			delay = min(2*delay, journalPollMax)
		}
		t.Stop()
		recs, err := st.Read(ctx, id, after, limit)
		if err != nil || len(recs) > 0 {
			return recs, err
		}
	}
}
