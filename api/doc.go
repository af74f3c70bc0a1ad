// Package api is Orrery's HTTP ops API over the plane, and its Go client.
//
// The server (NewServer, an http.Handler) answers JSON over the standard
// library's net/http:
//
//	GET  /healthz                         the process is up (no token needed)
//	GET  /readyz                          the store answers and Config.Ready agrees (no token needed)
//	GET  /metrics                         Prometheus text (Metrics)
//	POST /v1/worlds                       {"id","universe"}: 201 created, 200 the same again
//	GET  /v1/worlds?universe=&status=&detail=&q=&prefix=&after=&limit=  {"worlds":[…],"next"} sorted by id (detail=true: each world's view)
//	GET  /v1/worlds/{id}                  record, lineage, lease, assignment, head, journal floor, inbox cursor and depth
//	POST /v1/worlds/{id}/events           {"type","value"} or {"payload"}, "idempotency_key": 202 {"seq","duplicate"}
//	POST /v1/worlds/{id}/calls            {"type","value"} or {"payload"}, "call_id", "timeout_ms": the reply
//	GET  /v1/worlds/{id}/state?height=    {"height","hash","state","state_cbor"}: at the head, or after the
//	                                      step at height (replayed; 400 above the head, 410 compacted)
//	POST /v1/worlds/{id}/fork             {"id","height"}: 201 created, 200 the same again (any height: a
//	                                      snapshot there, else the state replayed up to it)
//	GET  /v1/worlds/{id}/forks            {"worlds":[…]}: the worlds forked from it, sorted by id
//	POST /v1/worlds/{id}/snapshot         a snapshot now, by the lease holder: {"world","height","state_hash","created_at"}
//	POST /v1/worlds/{id}/pause|resume|archive  {"reason"}
//	GET  /v1/worlds/{id}/journal?after=&limit=&wait_ms=&detail=  records after a height, long-polled with wait_ms
//	                                      (410 compacted, details.floor, when after is below the compaction floor);
//	                                      detail=true adds each record's input value and payload, the effect a
//	                                      receipt answers, and the step derived again: reply, intents, sends,
//	                                      timers, cancels (see history.go and docs/history.md)
//	GET  /v1/leases?worker=               the worlds each worker holds or is assigned
//	GET  /v1/effects?world=&kind=&status=&after=&limit=  {"effects":[…],"next"} every world's (or one's), in queue order
//	POST /v1/effects/{hash}/retry         {"reason"}: an operator's retry
//	POST /v1/effects/{hash}/receipt       {"status","body","reason"}: an operator's receipt
//	GET  /v1/timers?world=&status=&after=&limit=  {"timers":[…],"next"} every world's (or one's), by due time
//	GET  /v1/workers?status=&q=&prefix=&after=&limit=  {"workers":[…],"next"}: status live, draining or dead, world counts
//	GET  /v1/queues                       the global queue depths
//	GET  /v1/events                       server-sent events: the rows above as they change
//	GET  /v1/openapi.json                 the OpenAPI 3.1 description of all of the above (OpenAPI)
//	GET  /ui/…, GET /                     the dashboard's files, when Config.UI is set (no token needed)
//	POST /v1/workers/{id}/drain           {"draining"}
//	POST /v1/runs                         {"workflow","id","input","version"}: 201 started, 200 the same again, 409 other input; version: default the newest carried, 409 version_not_carried when no live worker carries it; with "signal":{"name","value","key"} (key or idempotency_key) a signal-with-start: an absent run is started, a run of the workflow is signalled, once per key
//	GET  /v1/runs?workflow=&status=&version=&q=&prefix=&after=&limit=  {"runs":[…],"next"} sorted by id (404 when the server serves no workflows)
//	GET  /v1/runs/{id}                    status, input, output or error, the actions that apply, and the step timeline
//	                                      with each attempt's start, input, output and failure
//	POST /v1/runs/{id}/cancel|pause|resume  {"reason"}: the run's view
//	POST /v1/runs/{id}/terminate          {"reason"}: the run fails "terminated: reason" (a blocked or unrunnable
//	                                      run's way out; 409 fenced while a worker holds it, 409 finished once ended)
//	POST /v1/runs/{id}/reset              {"step","reason"}: replay from step N (0 the first) with the code the
//	                                      next worker carries (a blocked run's way on); the run's view
//	POST /v1/runs/{id}/signals            {"name","value","idempotency_key"}: 202
//	GET  /v1/streams/{id}/audit?from=&to= events with from <= persistedAt < to (RFC 3339), in runSeq order
//	                                      (410 compacted when the window may hold compacted events)
//
// Lists share one shape: filters, a keyset cursor and a limit. limit is
// DefaultListLimit (100) for effects and timers, MaxListLimit (1000, the
// most, for worlds, runs and workers); a larger one is refused (400), never
// clamped. A page's "next", set only when more rows follow, is the "after"
// of the page after; rows written between pages never shift a page, so
// paging lists each row once. q is a case-insensitive id substring (of a
// run: or its workflow's name), prefix an id prefix. Effects and timers
// list the open ones (pending or inflight; scheduled or claimed) unless
// status says a state or "all"; a world filter that names no world is 404.
// A worker is dead when its last heartbeat is older than WorkerLiveFor,
// whatever its draining mark: draining is only a live worker's status.
//
// Requests are strict: a body must be application/json (415), at most
// Config.MaxBody (413), exactly one JSON value with no unknown field and
// every field of its type (400); unknown or repeated query parameters are
// refused too. Every error is {"code","message","details","request_id"}
// with a stable lowercase code (the Code* constants) and its status; store and plane
// sentinels map to them through one table, and a message never carries a
// stack or a Go type name. Only genuine internal failures are 5xx, besides
// a call's 504 timeout.
//
// Values: an event's or call's JSON value becomes the CBOR its handler
// decodes, checked against the handler's type before it is enqueued: a
// mismatch is a 400 that names the field, the JSON type expected and the
// one given (details field, expected, got), in JSON's terms, not CBOR's. Numbers written without fraction or exponent become int64
// (uint64 above its range), other numbers float64, objects maps with
// string keys. A handler's reply and a world's state go the other way:
// CBOR maps become objects (a key that is not a string is written as its
// JSON text), byte strings base64, infinities "+Inf" and "-Inf", integers
// exact JSON numbers (beyond 2^53 too), and the exact CBOR is given
// beside the JSON (reply_cbor, state_cbor); tags and NaN never occur, as
// the canonical form refuses them. A payload given instead
// of type and value is the complete wire form world.EncodeEvent or
// world.EncodeCall builds, checked by the plane as any ingress.
//
// Authentication is a bearer token, compared in constant time. Listen
// refuses to open an address beyond loopback without one (ErrInsecure),
// and serves TLS when given a certificate; Server.Serve answers on the
// listener with bounded timeouts until its context ends, then shuts down
// gracefully.
//
// Each request gets one server span from Config.Tracer (the OpenTelemetry
// API only: the binary chooses the SDK), named "orrery.api <route>", an
// id (the caller's X-Request-Id when sane, else a new one, returned in
// X-Request-Id and in an error's request_id), and one slog line with that
// request_id (Debug; a client's mistake, any 4xx, at Info; a 501, 503 or
// 504 at Warn; any other failure at Error). Metrics counts each answer by
// route pattern and status code. A store that cannot be reached, or that lost its
// connection before answering (store.ErrUnavailable), is 503 unavailable
// with Retry-After, logged at Warn: whether the request took effect is
// unknown, and a retry with the same idempotency key (or call id) is safe.
//
// The event stream (text/event-stream) sends the whole current state
// first, then, whenever a row changes, that row again: the queue depths,
// each worker as GET /v1/workers shows it, each world as GET
// /v1/worlds/{id} shows it (a lease renewal alone is not a change), each
// workflow run as a row of GET /v1/runs shows it (on a server with
// Config.Runs only), and a summary of the counts (see the Event* names). One poller per server
// reads the store every Config.EventPoll on Config.Executor's clock while
// at least one stream is open, however many are; each stream keeps at
// most one pending event per row, so a slow client costs no more memory
// than the state. Config.MaxEventStreams bounds the streams (one more is
// 503 with Retry-After), and every open stream ends when Serve's context
// does.
//
// Every route is described in api/openapi.json, an OpenAPI 3.1 document
// embedded in the binary (OpenAPI) and served at GET /v1/openapi.json, from
// which other languages generate clients. The package's tests fail when a
// route the server registers (Server.Routes) has no operation there, when an
// operation there is not served, and when a real request or answer of any
// operation does not match it; docs/api.md says how to describe a new
// endpoint.
//
// The Client mirrors every endpoint and answers errors as *Error, which
// errors.Is matches against the store and plane sentinels of its code.
//
// What the package never does: run world logic, enqueue input other than
// through the plane (events through plane.Ops, which validates them: a
// type and value go by their parts, so the payload is encoded once and
// never decoded, and the world id and key are checked by the store, not
// here; calls through plane.Client; the operator's own writes, status,
// retries, receipts and drains, are the store's operator calls), keep state
// between requests (the event poller's last round lives only while a
// stream is open), or spin: a journal long-poll re-reads on a bounded
// backoff that the world's inbox hints reset, and ends by its deadline,
// and the event poller runs only while a stream is open.
package api
