// Package replication is the replication stage: it reads the main logical replication slot with
// the pgoutput plugin, decodes every message, routes each change to its export and hands the
// sink one change.Unit per committed PostgreSQL transaction.
//
// Inputs: a replication connection (replication=database) on the main slot, starting at the
// slot's confirmed position; commands from the pipeline's owner (Detect, SetConsistentPoint,
// CopyDone, StartChunking, Remove, Fail, Restart) that set how each export is routed (router.go),
// and Confirm, the position the slot may confirm, which the status updates send. None of them
// blocks: they queue for the stream goroutine, in order; Detect and SetConsistentPoint return a
// channel that says when they were applied. The stage decides nothing about an export's phase:
// it reports what came of the commands as units (below) and Facts (a relation of a table that
// is not routed). Key columns of replica identity FULL tables come from a Keys catalog.
//
// Outputs: units on one channel, in stream order:
//
//   - KindTxn for each committed transaction holding changes of hydrated exports,
//   - KindProgress at yield points (nothing waiting on the socket) when the stream position moved
//     without anything to publish, including keepalives while no transaction is open,
//   - KindHeld and then KindHydrated when a hydrating export's copy is durable: its hold buffer is
//     released in commit order, after which its changes flow directly,
//   - KindRemoved when the stream passes the position at which an export left the publication,
//   - KindChunk for each chunk of a chunked copy, at the stream position of its high marker,
//     and KindHydrated after the last one.
//
// Chunked copies (chunks.go): StartChunking makes an export's changes flow directly while it is
// copied in chunks. The snapshot stage's chunker registers each chunk (OpenWindow), writes its
// low marker into the WAL, hands its rows over (ChunkRead) and writes its high marker; the
// markers arrive as logical decoding messages (pgoutput's messages option). Between a chunk's
// low marker and its publication, every key of the export that a committed transaction changes
// is noted in the chunk's window; at the high marker, once every earlier chunk of the export was
// published, its rows are published without the noted keys (a truncate drops them all). Keys
// changed before the low marker by a transaction that the chunk's snapshot does not see (its
// commit record came first, its xid left the proc array later) are noted too: the export keeps
// the keys the stream changed, with the xid of the last transaction that changed each, until a
// chunk's snapshot sees that transaction (memory: the keys changed between two chunk reads, like
// a window's keys between its markers). Transactions delivered before the copy started are
// the chunker's business: Streamed gives it the xids of the last transactions delivered, and it
// reads a chunk again until its snapshot sees them. The
// chunk's unit carries the chunker's claim on its memory (change.Claim): the sink returns it once
// the unit is durable, the stage when it drops the chunk.
//
// Large transactions (change.Piece): once the records of the open transaction pass
// Config.PieceBytes, they are handed to the sink as a piece, before the transaction's Commit
// message, and its held changes go to their hold buffers; at Commit the last piece follows,
// with the transaction's end LSN. This is safe because, with streaming off, pgoutput sends a
// transaction only after it committed (and only from WAL flushed to disk). Each piece takes
// its bytes from an in-flight budget (a change.Budget) of Config.PiecesInFlight pieces until the
// sink made it durable and returned the unit's claim; whole transactions take from the same budget, so the records between
// this stage and Kafka are bounded whatever the size and number of transactions (a unit larger
// than the budget goes alone). Every change message of
// the transaction is counted; a piece names how many it covers. When the server sends the
// transaction again, after a reconnect or after a restart that found part of it durable
// (ResumePartial, from the checkpoint), that many changes are skipped.
//
// Why not pgoutput's streaming of in-progress transactions (protocol 2, streaming 'on'): it
// sends a large transaction's changes while it runs, interleaved with other transactions and
// subtransactions, including changes that are later rolled back. Publishing them would show
// consumers changes that never committed, so they would have to be buffered per transaction
// id, on disk past a bound, until its stream commit, and read back: the same spill PostgreSQL
// already does for a transaction it decodes (logical_decoding_work_mem), plus stream start,
// stop, abort and subtransaction-abort handling. Its gain would be latency (a transaction's
// first pieces could be published as soon as it commits instead of after PostgreSQL replays
// it) and sparing the server's disk. Publishing the committed transaction in pieces as it
// arrives gives the same bounded memory with none of that machinery; a 2,000,000-row
// transaction (about 1 GB of changes) was in Kafka 16 s after its commit, while PostgreSQL
// spilled 1.2 GB decoding it, on a 2-core machine (integration/largetxn_test.go).
//
// Goroutines: receive reads the socket; the stream goroutine decodes, routes and emits, in
// stream order; with Config.Encoders, workers encode row changes it read ahead, and it takes
// their records only when they were made under the state each change meets (encoders.go), so
// what it emits is what it emits alone, byte for byte.
//
// Guarantees:
//
//   - A change of a hydrated export is dropped only when its transaction was already published
//     before a restart (commit LSN below the export's restored own position).
//   - A change of a hydrating export is dropped only when its commit LSN is below the export's
//     consistent point C; every later one is held, as a whole transaction, and released after
//     the copy, in order. Hold buffers are bounded in memory and spill to files beyond that.
//   - Standby status updates go out on their own timer and whenever the server asks, also while
//     the stage is blocked on a full output channel. Write, flush and apply all carry the LSN the
//     pipeline reports as confirmable (Kafka has everything below it); they never move backwards
//     and never carry a received position. Each asks the server for a keepalive, at least four
//     times per Config.Timeouts.Receive: a stream that hears nothing (no change, no keepalive)
//     for that long has a dead path and is dropped and reopened, after ending the walsender of
//     the dead connection, which would otherwise hold the slot (ReleaseStale).
//   - Relation messages are applied whenever they arrive, also for tables that are not routed,
//     and keep their order relative to the changes that follow them. Each one rebuilds its
//     relation's encoder, so a column added, dropped, renamed or retyped, or a new key, shows in
//     the records of every change after it. A Relation message that takes the last key column
//     from an export whose records were keyed (primary key dropped, REPLICA IDENTITY NOTHING,
//     FULL without a primary key) fails that export alone (a KindFailed unit after the
//     transaction): its compacted topic refuses records without a key. A Relation message under
//     a new name (ALTER TABLE ... RENAME) routes the table's changes to the new name, which is
//     not an export until the publication poll adds it.
//   - A message that does not decode (truncated, or a count or length larger than the message)
//     is a stream error, which reconnects, never a panic or an allocation of its declared size:
//     row changes are read in place with every length checked (fastpath.go), and every other
//     message is walked by checkMessage, which checks each count and length against the bytes
//     left, before pglogrepl's parser sees it (pgoutput.go). FuzzDecode feeds both arbitrary
//     messages; TestDecodeUnderMemoryLimit runs the lying ones under ulimit -v.
package replication
