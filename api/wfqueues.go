package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/orrery-run/orrery/store"
)

// WorkflowQueue is a named queue of workflow runs (GET /v1/queues lists
// them under workflow_queues; GET /v1/queues/{name} shows one): its
// limits (0: none), what it holds now, and its admissions within its rate
// period.
type WorkflowQueue struct {
	Name              string `json:"name"`
	Concurrency       int    `json:"concurrency"`
	WorkerConcurrency int    `json:"worker_concurrency"`
	RateLimit         int    `json:"rate_limit"`
	RatePeriodMs      int64  `json:"rate_period_ms"`
	Partitioned       bool   `json:"partitioned"`
	// Running counts the admitted runs (each holds a slot until it ends);
	// Waiting the runs not yet admitted.
	Running int `json:"running"`
	Waiting int `json:"waiting"`
	// WaitingByPriority and WaitingByPartition split Waiting; keys are
	// the priority in decimal and the partition key ("" for none).
	WaitingByPriority  map[string]int `json:"waiting_by_priority"`
	WaitingByPartition map[string]int `json:"waiting_by_partition"`
	// RunningByWorker splits Running by the worker that admitted the run.
	RunningByWorker map[string]int `json:"running_by_worker"`
	// AdmittedRecent counts the admissions within the last rate period
	// (kept only for a queue with a rate limit).
	AdmittedRecent int `json:"admitted_recent"`
}

// QueuesView is GET /v1/queues: the store's gauges and the named queues
// of workflow runs (absent when none is declared).
type QueuesView struct {
	Queues
	Workflow []WorkflowQueue `json:"workflow_queues,omitempty"`
}

// QueueLimits is the body of PUT /v1/queues/{name}: a queue's limits (a
// zero limit is no limit).
type QueueLimits struct {
	Concurrency       int   `json:"concurrency"`
	WorkerConcurrency int   `json:"worker_concurrency"`
	RateLimit         int   `json:"rate_limit"`
	RatePeriodMs      int64 `json:"rate_period_ms"`
	Partitioned       bool  `json:"partitioned"`
}

func (s *Server) workflowQueueRoutes() {
	s.route("GET /v1/queues/{name}", false, s.getWorkflowQueue)
	s.route("PUT /v1/queues/{name}", false, s.putWorkflowQueue)
}

// workflowQueues lists every declared queue with its depths.
func (s *Server) workflowQueues(ctx context.Context) ([]WorkflowQueue, error) {
	qs, err := s.cfg.Store.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]WorkflowQueue, 0, len(qs))
	for _, q := range qs {
		v, err := s.workflowQueue(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (s *Server) workflowQueue(ctx context.Context, q store.QueueSpec) (WorkflowQueue, error) {
	v := WorkflowQueue{Name: q.Name, Concurrency: q.Concurrency, WorkerConcurrency: q.WorkerConcurrency, RateLimit: q.RateLimit,
		RatePeriodMs: q.RatePeriod.Milliseconds(), Partitioned: q.Partitioned,
		WaitingByPriority: map[string]int{}, WaitingByPartition: map[string]int{}, RunningByWorker: map[string]int{}}
	rs, err := s.cfg.Store.ListQueuedRuns(ctx, q.Name)
	if err != nil {
		return v, err
	}
	for _, r := range rs {
		if r.Admitted() {
			v.Running++
			v.RunningByWorker[r.Worker]++
			continue
		}
		v.Waiting++
		v.WaitingByPriority[strconv.Itoa(r.Priority)]++
		v.WaitingByPartition[r.Partition]++
	}
	if v.AdmittedRecent, err = s.cfg.Store.RecentAdmissions(ctx, q.Name); err != nil {
		return v, err
	}
	return v, nil
}

func queueNotFound(name string) error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("no queue %q", truncate(name, 80)),
		Details: map[string]any{"resource": "queue"}}
}

func (s *Server) getWorkflowQueue(r *http.Request, _ *reqCtx) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	name := r.PathValue("name")
	if err := checkID("queue", name); err != nil {
		return 0, nil, err
	}
	q, err := s.cfg.Store.GetQueue(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, queueNotFound(name)
	}
	if err != nil {
		return 0, nil, err
	}
	v, err := s.workflowQueue(r.Context(), q)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, v, nil
}

// putWorkflowQueue declares a queue or replaces its limits, as a
// definition's declaration would (the next admission counts them).
func (s *Server) putWorkflowQueue(r *http.Request, rc *reqCtx) (int, any, error) {
	var req QueueLimits
	if err := s.body(r, rc, &req, true); err != nil {
		return 0, nil, err
	}
	name := r.PathValue("name")
	if err := checkID("queue", name); err != nil {
		return 0, nil, err
	}
	q := store.QueueSpec{Name: name, Concurrency: req.Concurrency, WorkerConcurrency: req.WorkerConcurrency,
		RateLimit: req.RateLimit, RatePeriod: time.Duration(req.RatePeriodMs) * time.Millisecond, Partitioned: req.Partitioned}
	if err := s.cfg.Store.PutQueue(r.Context(), q); err != nil {
		return 0, nil, err
	}
	v, err := s.workflowQueue(r.Context(), q)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, v, nil
}

// WorkflowQueues lists the named queues of workflow runs.
func (c *Client) WorkflowQueues(ctx context.Context) ([]WorkflowQueue, error) {
	var out QueuesView
	_, err := c.do(ctx, http.MethodGet, "/v1/queues", nil, nil, &out)
	return out.Workflow, err
}

// WorkflowQueue shows one named queue of workflow runs; an unknown one is
// a not_found error.
func (c *Client) WorkflowQueue(ctx context.Context, name string) (WorkflowQueue, error) {
	var out WorkflowQueue
	_, err := c.do(ctx, http.MethodGet, "/v1/queues/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}

// PutWorkflowQueue declares queue name with limits l, or replaces its
// limits (the next admission counts them).
func (c *Client) PutWorkflowQueue(ctx context.Context, name string, l QueueLimits) (WorkflowQueue, error) {
	var out WorkflowQueue
	_, err := c.do(ctx, http.MethodPut, "/v1/queues/"+url.PathEscape(name), nil, l, &out)
	return out, err
}

// StartOptions place a run started through the API on a named queue.
type StartOptions struct {
	// Version pins the run to that version of the workflow (0: the
	// newest the server carries).
	Version   uint64
	Queue     string
	Priority  int
	Partition string
	// Signal, when its Name is set, makes the start a signal-with-start:
	// the run is started unless it exists, and sent the signal.
	Signal StartSignal
	// Attributes are the run's search attributes at its start.
	Attributes map[string]string
}

// StartSignal is the signal of a signal-with-start.
type StartSignal struct {
	Name           string
	Value          any
	IdempotencyKey string
}

// StartRunOn is StartRun with options: a version to pin the run to, and a
// named queue to place it on.
func (c *Client) StartRunOn(ctx context.Context, workflowName, id string, input any, o StartOptions) (v RunView, created bool, err error) {
	raw, err := json.Marshal(input)
	if err != nil {
		return RunView{}, false, err
	}
	req := startRunReq{Workflow: workflowName, ID: id, Input: raw, Version: o.Version,
		Queue: o.Queue, Priority: o.Priority, Partition: o.Partition, Attributes: o.Attributes}
	if o.Signal.Name != "" {
		val, err := json.Marshal(o.Signal.Value)
		if err != nil {
			return RunView{}, false, err
		}
		req.Signal = &signalReq{Name: o.Signal.Name, Value: val, IdempotencyKey: o.Signal.IdempotencyKey}
	}
	st, err := c.do(ctx, http.MethodPost, "/v1/runs", nil, req, &v)
	return v, st == http.StatusCreated, err
}
