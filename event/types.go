package event

// Run-level lifecycle event types (the execution semantics contract §5). RunQueued is owned by
// admission control and is run-level too.
const (
	RunQueued    = "RunQueued"
	RunStarted   = "RunStarted"
	RunPaused    = "RunPaused"
	RunResumed   = "RunResumed"
	RunCompleted = "RunCompleted"
	RunFailed    = "RunFailed"
	RunCancelled = "RunCancelled"
)

// Step-level lifecycle event types (the execution semantics contract §5).
const (
	StepStarted   = "StepStarted"
	StepCompleted = "StepCompleted"
	StepFailed    = "StepFailed"
	StepSkipped   = "StepSkipped"
)

// IsRunLevel reports whether eventType is one of the run-level lifecycle
// types of the execution semantics contract v2.0.0. The set is part of the idempotency-key contract
// (see IdempotencyKey), so it changes only with a major contract version.
func IsRunLevel(eventType string) bool {
	switch eventType {
	case RunQueued, RunStarted, RunPaused, RunResumed, RunCompleted, RunFailed, RunCancelled:
		return true
	}
	return false
}

// IsStepLevel reports whether eventType is one of the step-level lifecycle
// types of the execution semantics contract v2.0.0.
func IsStepLevel(eventType string) bool {
	switch eventType {
	case StepStarted, StepCompleted, StepFailed, StepSkipped:
		return true
	}
	return false
}

// IsKnown reports whether eventType is a lifecycle type of the execution semantics contract v2.0.0.
// Unknown types are legal: projectors must tolerate future types (§4.3).
func IsKnown(eventType string) bool { return IsRunLevel(eventType) || IsStepLevel(eventType) }
