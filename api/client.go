package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Client is the Go client of the ops API, one method per endpoint. Every
// error the server answers comes back as an *Error (with its HTTP status);
// a transport failure is returned as the HTTP client gave it.
type Client struct {
	base  string // scheme, host and path prefix, without a trailing slash
	token string
	http  *http.Client
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the client use hc (for its transport, TLS roots
// or timeouts) instead of a plain http.Client. Waits (calls, journal
// long-polls) are bounded by their contexts, so hc should have no
// Timeout shorter than the longest wait.
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.http = hc } }

// NewClient returns a client of the API at baseURL ("http://host:port",
// optionally with a path prefix), presenting token ("" for none).
func NewClient(baseURL, token string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &ConfigError{Field: "baseURL", Reason: "must be an absolute http or https URL"}
	}
	u.RawQuery, u.Fragment = "", ""
	c := &Client{base: strings.TrimSuffix(u.String(), "/"), token: token, http: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// do sends one request and decodes a success into out (nil: discarded);
// it returns the status of a success.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) (int, error) {
	target := c.base + path // path's variable segments are escaped by the caller
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, errorOf(resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("api: the server's answer does not decode: %w", err)
		}
	}
	return resp.StatusCode, nil
}

// errorOf is the *Error of an answer with status and body.
func errorOf(status int, b []byte) *Error {
	e := &Error{Status: status}
	if json.Unmarshal(b, e) != nil || e.Code == "" {
		e.Code, e.Message = CodeInternal, strings.TrimSpace(truncate(string(b), 512))
		if status < 500 {
			e.Code = CodeInvalidArgument
		}
	}
	return e
}

func worldPath(id string, rest ...string) string {
	p := "/v1/worlds/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Health is GET /healthz: nil when the process answers.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil)
	return err
}

// Ready is GET /readyz: nil when the store answers and the server is
// ready.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil)
	return err
}

// CreateWorld creates world id in universe. Creating it again in the same
// universe answers the existing world with created=false; another
// universe is an already_exists error (errors.Is store.ErrWorldExists).
func (c *Client) CreateWorld(ctx context.Context, id, universe string) (w World, created bool, err error) {
	st, err := c.do(ctx, http.MethodPost, "/v1/worlds", nil, createWorldReq{ID: id, Universe: universe}, &w)
	return w, st == http.StatusCreated, err
}

// ListWorlds lists the worlds of universe ("": every universe the server
// hosts) with status ("": any), sorted by id.
func (c *Client) ListWorlds(ctx context.Context, universe string, status store.WorldStatus) ([]World, error) {
	q := url.Values{}
	if universe != "" {
		q.Set("universe", universe)
	}
	if status != "" {
		q.Set("status", string(status))
	}
	var out worldsResp
	_, err := c.do(ctx, http.MethodGet, "/v1/worlds", q, nil, &out)
	return out.Worlds, err
}

// ListWorldViews is ListWorlds with each world's view (GetWorld's
// answer): lease, assignment, head, inbox cursor and depth.
func (c *Client) ListWorldViews(ctx context.Context, universe string, status store.WorldStatus) ([]WorldView, error) {
	q := url.Values{"detail": {"true"}}
	if universe != "" {
		q.Set("universe", universe)
	}
	if status != "" {
		q.Set("status", string(status))
	}
	var out worldViewsResp
	_, err := c.do(ctx, http.MethodGet, "/v1/worlds", q, nil, &out)
	return out.Worlds, err
}

// GetWorld returns a world's record, lease, assignment and heights.
func (c *Client) GetWorld(ctx context.Context, id string) (WorldView, error) {
	var out WorldView
	_, err := c.do(ctx, http.MethodGet, worldPath(id), nil, nil, &out)
	return out, err
}

// Send enqueues an event of input type typeName carrying value (encoded
// as JSON, then as CBOR by the server), deduplicated by key ("" for
// none).
func (c *Client) Send(ctx context.Context, worldID, typeName string, value any, key string) (Ack, error) {
	raw, err := json.Marshal(value)
	if err != nil {
		return Ack{}, err
	}
	var out Ack
	_, err = c.do(ctx, http.MethodPost, worldPath(worldID, "events"), nil, eventReq{Type: typeName, Value: raw, IdempotencyKey: key}, &out)
	return out, err
}

// SendPayload enqueues an event given as its complete wire payload
// (world.EncodeEvent's bytes).
func (c *Client) SendPayload(ctx context.Context, worldID string, payload []byte, key string) (Ack, error) {
	var out Ack
	_, err := c.do(ctx, http.MethodPost, worldPath(worldID, "events"), nil, eventReq{Payload: payload, IdempotencyKey: key}, &out)
	return out, err
}

// CallOptions qualify a call: CallID (empty: the server draws one) makes
// a retried call wait for the same call; Timeout (0: the server's
// default) bounds the wait on the server, which caps it.
type CallOptions struct {
	CallID  string
	Timeout time.Duration
}

func (o CallOptions) req() callReq {
	r := callReq{CallID: o.CallID}
	if o.Timeout > 0 {
		r.TimeoutMs = max(o.Timeout.Milliseconds(), 1)
	}
	return r
}

// Call sends a call of input type typeName carrying value and waits for
// the handler's reply. A handler that failed is a call_failed error
// (errors.Is plane.ErrCallFailed); a wait that ran out is a timeout
// error whose Details["call_id"] names the call to wait for again.
func (c *Client) Call(ctx context.Context, worldID, typeName string, value any, opts CallOptions) (CallResult, error) {
	raw, err := json.Marshal(value)
	if err != nil {
		return CallResult{}, err
	}
	req := opts.req()
	req.Type, req.Value = typeName, raw
	var out CallResult
	_, err = c.do(ctx, http.MethodPost, worldPath(worldID, "calls"), nil, req, &out)
	return out, err
}

// CallPayload is Call with the call given as its complete wire payload
// (world.EncodeCall's bytes, which carry the call id).
func (c *Client) CallPayload(ctx context.Context, worldID string, payload []byte, opts CallOptions) (CallResult, error) {
	req := opts.req()
	req.Payload = payload
	var out CallResult
	_, err := c.do(ctx, http.MethodPost, worldPath(worldID, "calls"), nil, req, &out)
	return out, err
}

// State returns a world's state at its head.
func (c *Client) State(ctx context.Context, worldID string) (State, error) {
	var out State
	_, err := c.do(ctx, http.MethodGet, worldPath(worldID, "state"), nil, nil, &out)
	return out, err
}

// Fork creates newID from src's snapshot at height (0: src's active
// snapshot). A repeat answers the existing fork with created=false.
func (c *Client) Fork(ctx context.Context, src, newID string, height uint64) (w World, created bool, err error) {
	st, err := c.do(ctx, http.MethodPost, worldPath(src, "fork"), nil, forkReq{ID: newID, Height: height}, &w)
	return w, st == http.StatusCreated, err
}

func (c *Client) setStatus(ctx context.Context, worldID, action, reason string) (World, error) {
	var out World
	_, err := c.do(ctx, http.MethodPost, worldPath(worldID, action), nil, reasonReq{Reason: reason}, &out)
	return out, err
}

// Pause pauses a world: its lease ends and input waits in its inbox.
func (c *Client) Pause(ctx context.Context, worldID, reason string) (World, error) {
	return c.setStatus(ctx, worldID, "pause", reason)
}

// Resume makes a paused world active again.
func (c *Client) Resume(ctx context.Context, worldID, reason string) (World, error) {
	return c.setStatus(ctx, worldID, "resume", reason)
}

// Archive archives a world for good.
func (c *Client) Archive(ctx context.Context, worldID, reason string) (World, error) {
	return c.setStatus(ctx, worldID, "archive", reason)
}

// Journal reads up to limit records after height after (limit 0: the
// server's default). With wait > 0 the server holds the request until a
// record exists or wait (at most MaxJournalWait) has passed.
func (c *Client) Journal(ctx context.Context, worldID string, after uint64, limit int, wait time.Duration) (JournalPage, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if wait > 0 {
		q.Set("wait_ms", strconv.FormatInt(max(wait.Milliseconds(), 1), 10))
	}
	var out JournalPage
	_, err := c.do(ctx, http.MethodGet, worldPath(worldID, "journal"), q, nil, &out)
	return out, err
}

// JournalDetail reads up to limit records after height after, each with
// its detail (journal?detail=true): the input's value and payload, the
// effect a receipt answers, and the step derived again: its reply,
// intents, sends, timers and cancels (Record.Derived; DeriveError says
// why not).
func (c *Client) JournalDetail(ctx context.Context, worldID string, after uint64, limit int) (JournalPage, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "detail": {"true"}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out JournalPage
	_, err := c.do(ctx, http.MethodGet, worldPath(worldID, "journal"), q, nil, &out)
	return out, err
}

// StateAt returns a world's state after the step at height (0: its
// initial state), replayed from the highest snapshot at or below it. A
// height above the head is an *Error invalid_argument (400); one whose
// journal is compacted is compacted (410, errors.Is store.ErrCompacted).
func (c *Client) StateAt(ctx context.Context, worldID string, height uint64) (State, error) {
	var out State
	q := url.Values{"height": {strconv.FormatUint(height, 10)}}
	_, err := c.do(ctx, http.MethodGet, worldPath(worldID, "state"), q, nil, &out)
	return out, err
}

// Forks lists the worlds forked from worldID, sorted by id.
func (c *Client) Forks(ctx context.Context, worldID string) ([]World, error) {
	var out worldsResp
	_, err := c.do(ctx, http.MethodGet, worldPath(worldID, "forks"), nil, nil, &out)
	return out.Worlds, err
}

// Leases lists the worlds worker holds or is assigned ("": every
// worker's).
func (c *Client) Leases(ctx context.Context, worker string) ([]LeaseRow, error) {
	q := url.Values{}
	if worker != "" {
		q.Set("worker", worker)
	}
	var out leasesResp
	_, err := c.do(ctx, http.MethodGet, "/v1/leases", q, nil, &out)
	return out.Leases, err
}

// Effects lists a world's pending and inflight effects, in queue order.
func (c *Client) Effects(ctx context.Context, worldID string) ([]Effect, error) {
	var out effectsResp
	_, err := c.do(ctx, http.MethodGet, "/v1/effects", url.Values{"world": {worldID}}, nil, &out)
	return out.Effects, err
}

// RetryEffect is an operator's retry of an effect whose receipt was error
// or timeout (otherwise a not_retryable error, errors.Is
// store.ErrNotRetryable).
func (c *Client) RetryEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error) {
	var out EffectStatus
	_, err := c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(intentHash)+"/retry", nil, reasonReq{Reason: reason}, &out)
	return out, err
}

// HoldEffect keeps a pending or inflight effect from every adapter until
// ReleaseHeld or InjectReceipt (a done or withdrawn one: an effect_ended
// error, errors.Is store.ErrEffectEnded).
func (c *Client) HoldEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error) {
	var out EffectStatus
	_, err := c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(intentHash)+"/hold", nil, reasonReq{Reason: reason}, &out)
	return out, err
}

// ReleaseHeld lets a held effect run again at once.
func (c *Client) ReleaseHeld(ctx context.Context, intentHash, reason string) (EffectStatus, error) {
	var out EffectStatus
	_, err := c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(intentHash)+"/release", nil, reasonReq{Reason: reason}, &out)
	return out, err
}

// ReleaseAllHeld releases every held effect and returns how many.
func (c *Client) ReleaseAllHeld(ctx context.Context, reason string) (int, error) {
	var out HeldCount
	_, err := c.do(ctx, http.MethodPost, "/v1/effects/held/release", nil, reasonReq{Reason: reason}, &out)
	return out.Released, err
}

// InjectReceipt hands a pending or inflight effect's world an operator's
// receipt: status ok, error or timeout, and body (encoded as JSON, then as
// CBOR; nil for none).
func (c *Client) InjectReceipt(ctx context.Context, intentHash, status string, body any, reason string) (ReceiptAck, error) {
	req := receiptReq{Status: status, Reason: reason}
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return ReceiptAck{}, err
		}
		req.Body = raw
	}
	var out ReceiptAck
	_, err := c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(intentHash)+"/receipt", nil, req, &out)
	return out, err
}

// Timers lists a world's scheduled and claimed timers.
func (c *Client) Timers(ctx context.Context, worldID string) ([]Timer, error) {
	var out timersResp
	_, err := c.do(ctx, http.MethodGet, "/v1/timers", url.Values{"world": {worldID}}, nil, &out)
	return out.Timers, err
}

// Workers lists the worker inventory.
func (c *Client) Workers(ctx context.Context) ([]Worker, error) {
	var out workersResp
	_, err := c.do(ctx, http.MethodGet, "/v1/workers", nil, nil, &out)
	return out.Workers, err
}

// Queues returns the store's global queue depths.
func (c *Client) Queues(ctx context.Context) (Queues, error) {
	var out Queues
	_, err := c.do(ctx, http.MethodGet, "/v1/queues", nil, nil, &out)
	return out, err
}

// Drain marks a worker draining (or not): the orchestrator moves its
// worlds away. An unknown worker is a not_found error.
func (c *Client) Drain(ctx context.Context, worker string, draining bool) (Worker, error) {
	var out Worker
	_, err := c.do(ctx, http.MethodPost, "/v1/workers/"+url.PathEscape(worker)+"/drain", nil, drainReq{Draining: &draining}, &out)
	return out, err
}

// Events follows GET /v1/events: fn receives each event in order, the
// whole current state first (up to EventSynced), then the rows that
// change. It returns when ctx ends (ctx's error), when the server ends
// the stream (nil), or when fn returns an error (that error).
func (c *Client) Events(ctx context.Context, fn func(StreamEvent) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return errorOf(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var name string
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		if line == "" { // the end of an event
			if data != nil {
				if name == "" {
					name = "message"
				}
				if err := fn(StreamEvent{Name: name, Data: data}); err != nil {
					return err
				}
			}
			name, data = "", nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			if data == nil {
				data = []byte{}
			} else {
				data = append(data, '\n')
			}
			data = append(data, value...)
		} // a comment (empty field), retry and id are not the client's business
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sc.Err()
}

// ListOptions page a list: Search is a case-insensitive substring of the
// id (of a run: or its workflow's name), Prefix an id prefix, After the
// Next of the page before, Limit the page size (0: the server's default;
// at most MaxListLimit).
type ListOptions struct {
	Search, Prefix, After string
	Limit                 int
}

func (o ListOptions) values(q url.Values) url.Values {
	set(q, "q", o.Search)
	set(q, "prefix", o.Prefix)
	set(q, "after", o.After)
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}

func set(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

// WorldQuery filters SearchWorlds.
type WorldQuery struct {
	Universe string
	Status   store.WorldStatus
	ListOptions
}

// SearchWorlds reads one page of worlds and the next page's cursor (""
// on the last page).
func (c *Client) SearchWorlds(ctx context.Context, f WorldQuery) ([]World, string, error) {
	q := url.Values{}
	set(q, "universe", f.Universe)
	set(q, "status", string(f.Status))
	var out worldsResp
	_, err := c.do(ctx, http.MethodGet, "/v1/worlds", f.values(q), nil, &out)
	return out.Worlds, out.Next, err
}

// RunQuery filters SearchRuns.
type RunQuery struct {
	Workflow, Status string
	// Version keeps the runs pinned to that workflow version (0: any).
	Version uint64
	// Attrs keeps the runs carrying every one of these search attributes.
	Attrs map[string]string
	ListOptions
}

// SearchRuns reads one page of runs and the next page's cursor.
func (c *Client) SearchRuns(ctx context.Context, f RunQuery) ([]Run, string, error) {
	q := url.Values{}
	set(q, "workflow", f.Workflow)
	set(q, "status", f.Status)
	if f.Version != 0 {
		q.Set("version", strconv.FormatUint(f.Version, 10))
	}
	for _, k := range slices.Sorted(maps.Keys(f.Attrs)) {
		q.Add("attr", k+":"+f.Attrs[k])
	}
	var out runsResp
	_, err := c.do(ctx, http.MethodGet, "/v1/runs", f.values(q), nil, &out)
	return out.Runs, out.Next, err
}

// WorkerQuery filters SearchWorkers: Status is live, draining or dead.
type WorkerQuery struct {
	Status string
	ListOptions
}

// SearchWorkers reads one page of workers and the next page's cursor.
func (c *Client) SearchWorkers(ctx context.Context, f WorkerQuery) ([]Worker, string, error) {
	q := url.Values{}
	set(q, "status", f.Status)
	var out workersResp
	_, err := c.do(ctx, http.MethodGet, "/v1/workers", f.values(q), nil, &out)
	return out.Workers, out.Next, err
}

// EffectQuery filters QueryEffects; empty fields match every effect.
// Status is pending, inflight, done or withdrawn; After the Next of the
// page before.
type EffectQuery struct {
	World, Kind, Status, After string
	Limit                      int
}

// QueryEffects reads one page of effects across worlds, in queue order,
// and the next page's cursor.
func (c *Client) QueryEffects(ctx context.Context, f EffectQuery) ([]Effect, string, error) {
	q := url.Values{}
	set(q, "world", f.World)
	set(q, "kind", f.Kind)
	set(q, "status", f.Status)
	set(q, "after", f.After)
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out effectsResp
	_, err := c.do(ctx, http.MethodGet, "/v1/effects", q, nil, &out)
	return out.Effects, out.Next, err
}

// TimerQuery filters QueryTimers; Status is scheduled, claimed or
// delivered.
type TimerQuery struct {
	World, Status, After string
	Limit                int
}

// QueryTimers reads one page of timers across worlds, by due time, and the
// next page's cursor.
func (c *Client) QueryTimers(ctx context.Context, f TimerQuery) ([]Timer, string, error) {
	q := url.Values{}
	set(q, "world", f.World)
	set(q, "status", f.Status)
	set(q, "after", f.After)
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out timersResp
	_, err := c.do(ctx, http.MethodGet, "/v1/timers", q, nil, &out)
	return out.Timers, out.Next, err
}

// UpgradeWorld asks a world to move to version to of its definition
// (POST /v1/worlds/{id}/upgrade). The upgrade's outcome is its journal
// record's; a version older than the world's is refused (errors.Is
// plane.ErrDowngrade).
func (c *Client) UpgradeWorld(ctx context.Context, worldID string, to uint64) (WorldUpgrade, error) {
	var out WorldUpgrade
	_, err := c.do(ctx, http.MethodPost, worldPath(worldID, "upgrade"), nil, upgradeReq{To: to}, &out)
	return out, err
}

// UpgradeUniverse asks a page of a universe's worlds, those with ids
// after after (at most limit; 0: 100), to move to version to (POST
// /v1/universes/{universe}/upgrade). Call again with Next until it is
// empty to cover the universe.
func (c *Client) UpgradeUniverse(ctx context.Context, universe string, to uint64, after string, limit int) (UniverseUpgrade, error) {
	var out UniverseUpgrade
	_, err := c.do(ctx, http.MethodPost, "/v1/universes/"+url.PathEscape(universe)+"/upgrade", nil, upgradeReq{To: to, After: after, Limit: limit}, &out)
	return out, err
}
