// Package migrate copies a whole Orrery store into another and proves the
// copy: the library under `orrery migrate` (SQLite to PostgreSQL and back,
// between two PostgreSQL databases or two SQLite files) and `orrery
// restore`.
//
// What it owns:
//
//   - Copy streams the source's export (store.Exporter: every record of one
//     consistent snapshot) into the target's importer in batches, each one
//     transaction. Before it writes anything it refuses a source that live
//     nodes may still be writing (ErrSourceLive: a copy of a store being
//     written misses every write after its snapshot) and a target that is
//     not empty (ErrTargetNotEmpty) unless asked to merge, which it allows
//     only when no world or stream of the source exists in the target
//     (ErrCollision), or a Resume, which completes a copy an earlier run
//     left part-way: the import leaves every record the target holds as
//     it would write it (store.Importer) and refuses one held as anything
//     else (store.ErrConflict). A Transform hook sees every record on the way (a
//     restore holds the open effects of an old backup instead of running
//     them again). Progress reports records, worlds, bytes, rate and ETA.
//   - Verify compares two stores and reports every difference by world:
//     per-kind record counts; each world's universe, status, journal head,
//     compaction floor, inbox cursor, snapshot heights and hashes and a
//     digest of its journal; each world's state hash, obtained by replaying
//     it on both stores with the binary's definitions (a world whose
//     universe the binary lacks is reported as not replayed, never passed
//     silently); each workflow run's status.
//
// What the import itself changes (leases released with their epochs kept,
// inflight claims returned to their queues) is the store's, described with
// store.PortRecord; a verified copy is one that equals its source up to
// those changes.
//
// It never writes to the source, and never starts a node: the target
// serves once an operator points `orrery serve` at it.
package migrate
