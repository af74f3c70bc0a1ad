// Package schedule is Orrery's durable schedules: a cron expression (read
// in an IANA time zone) or a fixed interval, with a deterministic jitter,
// that starts a workflow run or sends a world an event at each tick, with
// an overlap policy (skip, buffer_one, allow) and a catch-up policy after
// downtime (skip, once, all up to a bound).
//
// A schedule is a store row (store.Schedules): its spec and state are this
// package's JSON, and the store judges only its next fire time, by its own
// clock. Any number of schedulers (Run) may share a store: a tick is
// recorded by one compare-and-swap of the row's version, and its start is
// idempotent by a key derived from the schedule id and the tick (RunID,
// DedupeKey), so each tick starts once across a cluster, and a tick whose
// scheduler died after recording it is started by the next one. Those
// keys are closed namespaces (store.ScheduleRunPrefix,
// store.ScheduleKeyPrefix): only the scheduler's start may use them, so no
// user's run or input can take a tick's identity first, and a schedule id
// (CheckID) has none of their separators, so no two schedules' ticks share
// one. Operators change a schedule with Create, Pause, Resume, Trigger
// (TriggerKeyed: idempotent by the caller's key) and Delete, each a
// compare-and-swap too. docs/schedules.md says what is
// guaranteed.
package schedule
