// Package web is Orrery's dashboard: a page of plain HTML, CSS and
// JavaScript, embedded in the binary, that shows and operates a cluster
// through the ops API of package api.
//
// Handler serves the files; the API server mounts it under /ui/
// (api.Config.UI) and redirects / there. The page has tabs:
//
//   - Worlds: each world's status, lease holder and epoch, journal head,
//     inbox depth and lineage (parent@height), with pause, resume and
//     fork;
//   - Workers: liveness, draining, the worlds each holds and is assigned,
//     the last heartbeat, with drain and undrain;
//   - Queues and timers: the global queue depths, and one world's pending
//     and inflight effects and its timers, with an operator's retry of an
//     effect;
//   - Journal: one world's last records, followed live with the journal's
//     long-poll;
//   - Runs: durable workflow runs from GET /v1/runs and a run's step
//     timeline from GET /v1/runs/{id}, with cancel (POST
//     /v1/runs/{id}/cancel). A server without those routes answers 404,
//     and the tab says so. The tab reads {"runs":[…]} (or a bare array) of
//     objects with id, workflow, version, status, started_at, ended_at or
//     duration_ms (or duration in nanoseconds), steps (a count or the step
//     list) and last_error; a run's steps (its "steps" or "timeline") have
//     step_id or id, status, and attempts: a count with the step's
//     started_at, duration and error, or the list of attempts, each with
//     its own. On a server that streams runs (the "run" events of GET
//     /v1/events), the rows and the open timeline follow them, so a
//     run's new status shows without a Refresh.
//
// The rows stay current through the API's server-sent events (GET
// /v1/events), read with fetch so that the request carries the token like
// every other: the stream's first events are the whole state, then each
// row again when it changes. An action answers with its result, or with
// the API's typed error (its code and message).
//
// Authentication: the page sends no token until the API answers 401; it
// then asks for one once, keeps it in the tab's sessionStorage and sends
// it as a bearer token. A server on loopback without a token never asks.
//
// What the package never does: read the store or the plane itself (the
// page knows only the JSON API), load anything from another origin (no
// CDN, no build step: the files are what is served), or hold any state
// on the server.
package web
