// Package watermark decides, for every export (published table), what its watermark is, when a
// watermark record is due, and how far the replication slot may be confirmed. It also defines the
// record format of the watermark topic.
//
// # The tracker
//
// Tracker is synchronous and free of I/O: no goroutines, no clock (time is passed in), no Kafka.
// The pipeline's owner goroutine, its only user, feeds it with what the sink made durable, in
// the order the sink made it durable, and with the transitions of each export's phase.
//
// The tracker keeps no lifecycle state of its own. The owner keeps each export's phase, and
// tells the tracker each transition's state (SetState; the tracker never calls back); only an export the
// owner has not taken up (restored from the watermark topic, not resumed or published again)
// says what its last record said. What the tracker keeps of an export is history: its own
// position, the snapshot attempt and its progress, what its records said and which of them are
// durable, and where its topic's rows to reconcile begin. The transition methods record what a
// transition does to that history; the owner decides which transitions happen (a removal once,
// a failure once and not after the removal), and calls each one while the export is still in
// the phase it leaves:
//
//   - Advance(S_d) for every durable transaction or progress unit: the durable stream position.
//     Every change of every hydrated export with commit LSN below S_d is durable, so a hydrated
//     export's own position P(e) follows it: P(e) = max(P(e), S_d). S_d never moves backwards.
//   - StartHydration when a snapshot attempt has its consistent point C, then SnapshotRows and
//     SnapshotCopied as the copy becomes durable, and Hydrated once the changes held back during
//     the copy are durable too. A hydrating export has no own position.
//   - Removed and Failed when an export leaves the publication or stops on a permanent error.
//   - StartChunked, ChunkDone and Hydrated for a chunked copy; Holding when an export's changes
//     are held for a new copy before its consistent point is known.
//
// Due then returns the watermark records to produce; Published says they are durable.
// Confirmable returns what the slot may confirm: the lowest durable own position over the
// hydrated exports (a hydrating export pins no WAL: after a crash it takes a new snapshot), or S_d
// when none is hydrated. An export whose last durable record says hydrated keeps pinning WAL at
// that record's position until a later record of it is durable, so the slot is never confirmed
// past a position a restart would resume from. Confirmable never moves backwards.
//
// # Watermarks
//
// In independent mode (the default) a hydrated export's watermark is its own position P(e):
// exports never wait for each other's snapshots. A hydrating export has no watermark; if an
// earlier attempt published one, it keeps publishing that value, without advancing, until it is
// hydrated again.
//
// In global mode every hydrated export publishes the same watermark W, the lowest own position
// over the live exports, where a hydrating export counts as lowest of all: while any export
// hydrates, W stays where it was. Removed, failed and restored-but-not-yet-hydrating exports do
// not count. A hydrating export publishes no watermark in either mode (its topic is not complete
// up to anything yet), except a value it published before, which never regresses.
//
// In both modes a published watermark never moves backwards, not across restarts (Restore) and
// not when the mode changes between restarts: an export publishes the maximum of what it
// published before and what the mode computes. After a switch from independent to global mode
// an export that already published more keeps its value until W passes it.
//
// A record is due at once for every state transition (snapshot start, snapshot copied, hydrated,
// removed, failed); for a live export whose watermark or own position moved, at most once per
// Interval/4; and as a heartbeat for every live export whose last record is Interval old. A
// removed or failed export gets one final record and then none until it is hydrated again.
//
// # Quiet exports
//
// A hydrated export whose topic's offsets (as Due is given them) are those of its last record is
// quiet: Due writes it no record. Quiet, called right after Due, returns one record (key
// QuietKey) for all of them: the lowest watermark and position of the quiet exports, and the
// other hydrated exports as Busy. It is due when a quiet export's record would be. A reader
// applies it to every export whose latest own record, read before it, says hydrated and which is
// not busy: the export's watermark is the higher of the two, with its own record's offsets,
// which still cover its whole topic. View does this for readers (pkg/wait), and TopicReader
// for the restart and cdc watermarks. So the records per second follow the busy exports, not the
// number of exports.
//
// # Restart
//
// At start-up the pipeline reads the watermark topic to its end through a TopicReader, which
// keeps only each export's latest record, the latest quiet record and the latest checkpoint as
// it reads (memory follows the number of exports, not the topic's age), and passes the records
// to Restore. Before that, Bound makes the reader refuse a value carrying an LSN past the end of
// the server's WAL (a *PastBoundError; the pipeline's restore check). Hydrated exports resume
// with their recorded position, which Resume returns as the replication stage's replay filter.
// Every other export is remembered only for its attempt number and last watermark: it gets no
// records until StartHydration (or Removed, or Failed) is called for it, so the pipeline must do
// that for each one still published before the first Due.
//
// # Checkpoint
//
// Watermark records are coalesced, so the last record of an export can lag what Kafka holds.
// After Due, the pipeline asks Checkpoint for the durable stream position S_d and writes it, when
// it moved, as one checkpoint record (key CheckpointKey, in the watermark topic) into the same
// Kafka transaction. Every state transition has its record in that transaction too, so the
// checkpoint covers exactly the exports whose latest record says hydrated. At restart,
// RestoreCheckpoint after Restore makes each of them resume at max(its record's position, S_d),
// and pins WAL there. One checkpoint per transaction, whatever the number of exports.
//
//	{"version": 1, "kind": "checkpoint", "position": "0/1A2B3C8", "position_lsn": 27439048, "ts": "2026-12-03T10:02:11Z"}
//
// A PostgreSQL transaction published in pieces spans several Kafka transactions. Each one that
// holds pieces of it, before the last, carries a checkpoint of version 2 whose partial names
// the transaction's commit LSN and how many of its change messages are durable; its position is
// CheckpointPosition, unchanged (the stream position passes the transaction only with its last
// piece). A restart skips those changes when the server sends the transaction again. Version 2
// makes an older build, which would publish them again, refuse to start; a checkpoint without
// partial stays version 1.
//
//	{"version": 2, "kind": "checkpoint", "position": "0/1A2B3C8", "position_lsn": 27439048, "partial": {"commit": "0/1A2C000", "changes": 1200000}, "ts": "2026-12-03T10:02:11Z"}
//
// A checkpoint also names the PostgreSQL timeline its positions were read on (Origin:
// "timeline", and "promoted_at", the switch point, past timeline 1), an addition that keeps
// version 1. After a failover, a start on the promoted server whose slot is still behind the
// promotion tells by it whether what Kafka holds past the promotion is the server's own (this
// timeline) or came from the old primary's WAL (an earlier one).
//
//	{"version": 1, "kind": "checkpoint", "position": "0/816A758", "position_lsn": 135702360, "timeline": 2, "promoted_at": "0/7FAE060", "ts": "2026-12-03T10:02:11Z"}
//
// # Record format (version 1)
//
// The watermark topic <prefix>.__watermarks is compacted and keyed by the export's name
// ("schema.table", parts double-quoted when they are not plain lower-case identifiers). Each
// value is one JSON object:
//
//	{
//	  "version": 1,
//	  "export": "public.orders",
//	  "topic": "shop.public.orders",
//	  "state": "hydrated",
//	  "mode": "independent",
//	  "watermark": "0/16B4A20",
//	  "watermark_lsn": 23808544,
//	  "position": "0/16B4A20",
//	  "offsets": {"0": 40211, "1": 39876, "2": 40102},
//	  "snapshot": {
//	    "attempt": 1,
//	    "consistent_point": "0/16B3748",
//	    "rows_copied": 120000,
//	    "rows_estimated": 120000,
//	    "started_at": "2025-03-14T09:26:53Z",
//	    "finished_at": "2025-03-14T09:27:35Z",
//	    "start_offsets": {"0": 0, "1": 0, "2": 0},
//	    "reconcile_from": {"0": 0, "1": 0, "2": 0}
//	  },
//	  "ts": "2025-03-14T09:27:36Z"
//	}
//
// Fields:
//
//   - version: the format version, 1. Readers reject versions they do not know.
//   - export, topic: the table and its Kafka topic.
//   - state: hydrating, hydrated, removed or failed.
//   - mode: independent or global, the mode of the instance that wrote the record.
//   - watermark: W(e) as PostgreSQL prints an LSN ("X/Y"), or null while the export has none.
//   - watermark_lsn: the same as a number, to compare with a change's source.lsn.
//   - position: the export's own position P(e); "0/0" while it has none (hydrating). A restart
//     resumes a hydrated export from it: changes in transactions ending at or below it are not
//     published again.
//   - offsets: per partition of topic, the next offset at the time of the record: what the
//     watermark covers.
//   - snapshot: the current (or, once hydrated, the last) snapshot attempt: its number, its
//     consistent point C (snapshot rows carry source.lsn C-1), rows copied so far and the
//     estimate, start and finish times of the copy, the topic's end offsets when the attempt
//     began, and reconcile_from: the offsets from which rows of unfinished earlier attempts must
//     be reconciled (a partition not listed is read from its beginning).
//   - error: why a failed export stopped.
//   - ts: when the record was produced.
//
// The promise to consumers: once a record with state hydrated and watermark W is read, every
// change of the export with commit LSN < W lies below the offsets the record names, partition by
// partition, and every record the topic receives after those offsets has source.lsn >= W.
// (Kafka makes a transaction visible partition by partition, so rely on the offsets, not on the
// order in which records arrive.)
package watermark
