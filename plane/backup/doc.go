// Package backup takes a consistent online backup of a SQLite store and
// restores a backup into any store: the library under `orrery backup` and
// `orrery restore`.
//
// Backup runs SQLite's VACUUM INTO on a connection of its own. VACUUM INTO
// reads the whole source inside one read transaction: in WAL mode that is
// a snapshot of the last commit before it began (the WAL frames committed
// by then included, later ones not), and a reader never blocks a writer,
// so nodes keep serving while it runs. What a long read does cost is the
// WAL checkpoint, which cannot pass the reader's snapshot until it ends:
// the WAL grows for the backup's length and is folded back afterwards.
// The file is written beside FILE and renamed into place only once it
// passes Check, so a FILE that exists is always a checked backup.
//
// Check opens a file read-only and proves it is an Orrery store this
// binary can read: SQLite's integrity_check passes (ErrCorrupt: a
// truncated or damaged file), it has a schema version (ErrNotStore: any
// other file) no newer than this binary's (ErrNewerFormat), and it counts
// its worlds, journal events and effects by state.
//
// Restore refuses a target a live node serves (ErrTargetLive: a worker's
// liveness promise still runs by the target's clock) unless Force, checks
// the backup, copies it (never the backup itself: a backup of an older
// schema is upgraded in a temporary copy) into the target through package
// migrate, applying the restore's rule for effects to each record as it is
// imported, and verifies the target against the backup as migrate does.
//
// The rule for effects: an effect pending or inflight in the backup may
// have run after the backup was taken, its receipt consumed in the history
// the restore throws away. Running it again on its own could do twice what
// should be done once, so Restore holds every such effect (EffectsHold,
// the default): no adapter claims it until an operator releases it (it
// runs again, at least once, under its unchanged intent hash as the
// idempotency key) or resolves it with the receipt the external system
// shows. The hold is written with the effect, in the import's transaction,
// never after the copy: a restore cut short, or a node claiming from the
// target while it runs, finds no effect of the backup pending.
// EffectsRerun releases them instead, for effects known to be idempotent,
// once the whole copy is written and verified. A done effect keeps its
// receipt and never runs again.
package backup
