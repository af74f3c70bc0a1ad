package workflow

import "github.com/orrery-run/orrery/event"

// Patched reports whether the run takes the code path of patch id: it is
// how one version's code changes for new runs without making the runs in
// flight diverge, as Temporal's patching does.
//
//	if workflow.Patched(c, "fee-in-cents") {
//		fee, err = workflow.Step(c, "fee-cents", ...) // new runs
//	} else {
//		fee, err = workflow.Step(c, "fee", ...) // runs that got here before the change
//	}
//
// It is journaled at its position in the run's step order. The first time
// a run gets there it records a patch marker (StepStarted and StepCompleted
// of step "sys:patch:<id>", of kind "patch", value true, written with the
// run's next write, like a plain step's completion) and returns true. A
// re-run finds the marker at that position and returns true again; a run
// whose history has another step at that position got there under the old
// code, so Patched returns false, records nothing and takes no position:
// the old path's steps replay as recorded. A run that crashed before
// reaching the patch, or whose marker was lost with a write that never
// landed, records it on its next try and takes the new path, which is
// sound because nothing of the old path was recorded there either. A
// replay (Replay) records nothing, so there Patched is true only where
// the marker is recorded.
//
// Patched asked for again under the same id in one execution answers as
// it first did. id follows the rules of step names. Once no run that may
// still reach the old path remains (none without the marker, see the
// workflows doc's "Changing workflow code"), replace the call with
// DeprecatePatch and keep only the new path; once no run with the marker
// remains either, remove that too.
func Patched(c *Ctx, id string) bool {
	if checkName("patch", id) != nil {
		return false
	}
	if c == nil || c.r == nil || c.exclusive(kindPatch, id) != nil || c.halted != nil || c.div != nil {
		return false
	}
	if v, ok := c.patches[id]; ok {
		return v
	}
	marker := patchBase + id
	k, steps := c.next, c.r.h.steps
	switch {
	case k < len(steps):
		h := steps[k]
		v := h.id == marker && h.kind == kindPatch
		if v {
			c.next++
		}
		c.patches[id] = v
		return v
	case c.r.replay:
		// Nothing past the recorded steps is asked for in a replay: the
		// old path it must have taken.
		c.patches[id] = false
		return false
	}
	// A new position: the run takes the patched path, and records it.
	if _, recorded := c.r.h.byID[marker]; recorded {
		// Recorded at another position: the function asks for it out of
		// order, which its step after will show as a divergence.
		c.patches[id] = false
		return false
	}
	if err := c.r.later(event.StepStarted, marker, 1, stepStarted{Kind: kindPatch}); err != nil {
		c.halt(err)
		return false
	}
	if err := c.r.later(event.StepCompleted, marker, 1, stepCompleted{Value: cborTrue()}); err != nil {
		c.halt(err)
		return false
	}
	c.next++
	c.patches[id] = true
	return true
}

// DeprecatePatch marks where a removed patch's Patched call stood, once
// every run that could take its old path has ended: it consumes the patch
// marker of id at its position when the run recorded one, records nothing
// otherwise, and the function then runs only the new path. Runs started
// with the patch (which have the marker) and runs started after its
// removal (which do not) both replay without divergence. Remove the call
// once no run recorded the marker either.
func DeprecatePatch(c *Ctx, id string) {
	if checkName("patch", id) != nil || c == nil || c.r == nil || c.exclusive(kindPatch, id) != nil || c.halted != nil || c.div != nil {
		return
	}
	if _, ok := c.patches[id]; ok {
		return
	}
	k, steps := c.next, c.r.h.steps
	v := k < len(steps) && steps[k].id == patchBase+id && steps[k].kind == kindPatch
	if v {
		c.next++
	}
	c.patches[id] = v
}

// cborTrue is a patch marker's value: CBOR true.
func cborTrue() []byte { return []byte{0xf5} }
