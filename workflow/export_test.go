package workflow

// Waiters is the number of Results waiting for run id's end on w (tests
// synchronise on it).
func (w *Worker) Waiters(id string) int {
	w.endMu.Lock()
	defer w.endMu.Unlock()
	return len(w.ends[id])
}
