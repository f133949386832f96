// Package snapshot copies the current rows of tables that are being added to the pipeline
// ("hydrating" exports), with one of two strategies: Chunker ("chunked", the default) and Stage
// ("copy").
//
// # Chunked (Chunker)
//
// A table is cut into ranges of its key (the replica identity columns, in the order of their
// index) of about 1 MiB each, with no planning pass: a chunk reads, in key order, up to ChunkRows
// rows after the previous chunk's last key (ORDER BY key LIMIT n over the key's index), and its
// range ends at the last key it read; a chunk that reads fewer is the table's last. So each row
// is read once. Config.Workers workers read chunks of every table being copied, largest first (a
// table just added is set up first), each on its own connection. One table's reads follow each
// other, since a chunk starts where the one before it ended; its markers, waits and hand-overs
// overlap with them. A chunk read again after its end was found reads its range whole:
//
//  1. ChunkHooks.OpenWindow registers the chunk with the replication stage;
//  2. the low marker is written into the WAL (pg_logical_emit_message, not transactional);
//  3. the worker waits until the transactions listed as running right after the marker are
//     over (a commit record precedes the moment a transaction stops counting as running: a
//     snapshot taken at once could miss a transaction the stream delivers before the marker).
//     This only makes such misses rare: pg_snapshot_xip leaves out running xids at or above
//     xmax, and long-running ones are not waited for;
//  4. the chunk is read with COPY in a REPEATABLE READ transaction of its own and encoded as
//     snapshot reads (op "r") at the low marker's LSN: one change.KindChunk unit, whose
//     change.Chunk names the range read (the markers name the chunk, not its range: the
//     replication stage notes every key of the table the stream changes in the window) and the
//     transactions the chunk's snapshot sees (change.XidSnapshot, from pg_current_snapshot in
//     the chunk's transaction): the replication stage also leaves to the stream the keys of
//     transactions it delivered before the low marker that the snapshot does not see. Those
//     it delivered before the copy started (ChunkHooks.Streamed, asked once per copy) were not
//     noted: a snapshot that misses one of them is not handed over; the chunk is read again
//     once a new snapshot sees it;
//  5. ChunkHooks.ChunkRead hands the unit over, then the high marker is written.
//
// Schema changes during a chunked copy. The chunk's transaction first locks the table (ACCESS
// SHARE) and only then takes its snapshot, so a rewrite (ALTER COLUMN TYPE, a volatile default)
// is either in the snapshot or waits for the chunk: an older snapshot would see a rewritten table
// empty. Under that snapshot the chunk compares the table's schema (published columns with their
// types, replica identity, key index) with the one the table was set up with; when it changed,
// the table is set up again before the COPY, so every chunk carries the columns and the key the
// stream's changes around it carry. Chunks stay cut by the key columns the copy started with
// (kept by attnum, so a rename does not matter): after a new primary key or replica identity
// index the ranges keep their meaning while the records are keyed by the new key. A range column
// dropped during the copy, a table without a key any more, or a table renamed (the COPY names the
// table) fails the export alone.
//
// The replication stage publishes the unit when the high marker arrives, without the rows whose
// key the stream changed after the low marker, or before it in a transaction the chunk's
// snapshot does not see, in chunk order. No transaction lives longer than
// one chunk's read. ChunkHooks.CopyComplete follows the last chunk. A chunk whose read fails is
// abandoned (ChunkHooks.AbandonWindow) and read again under a new id, on a new connection, after
// a backoff; a table that is gone, unreadable or unencodable fails alone (ChunkHooks.Failed).
// Memory: a chunk holds a full chunk's share of a budget of 2 × Workers chunks (a change.Budget)
// from before it is read, then only the share its rows need (a 10-row chunk 1/64 of a full one),
// until the sink made it durable and returned the unit's Claim. Config.Limiter caps rows read per
// second, before each read.
// ChunkJob.ResumeAfter continues a copy after the last durable chunk (a restart).
//
// From a hot standby (Config.Standby, PostgreSQL 16+) the chunks are read on the standby and
// their markers written on the primary (Config.PrimaryConnString), and step 3 becomes a wait
// until the standby has replayed the low marker: a standby makes a transaction visible when it
// replays its commit record, so from then on its snapshots hold every transaction that
// committed before the marker. Without a connection to the primary a chunked copy fails its
// table (ErrStandbyMarkers); the pipeline copies with the Stage instead.
//
// # Copy (Stage)
//
// The Stage copies the tables of a request from one consistent PostgreSQL snapshot, in
// parallel, and hands them to the sink as change.Units.
//
// Input: Requests, each a set of exports to hydrate together, served one at a time by Run.
//
// Per request the stage opens a replication connection, starts a REPEATABLE READ transaction,
// creates a temporary logical slot with USE_SNAPSHOT (its consistent point is C) and exports that
// snapshot. Ordinary worker connections (at most Config.Workers, no more than there are ranges)
// import it; the table schemas (pgcat.LoadTable), row estimates and sizes are read under it. As
// soon as every worker holds the snapshot the exporting transaction is committed, which drops
// the temporary slot: an imported snapshot stays valid in the importing transaction, while a
// slot held for the whole copy would pin WAL. Then Hooks.Begin learns C and the tables and assigns the
// attempt numbers, and the copy starts.
//
// The same works on a hot standby (Config.Standby, PostgreSQL 16+), and writes nothing there:
// the temporary slot, its exported snapshot and the workers are all the standby's. Creating the
// slot there waits for a running-transactions record from the primary; with
// Config.PrimaryConnString the stage asks the primary for them (pg_log_standby_snapshot) while
// it waits.
//
// Each table is split into ctid block ranges (SplitRanges); the ranges of all tables form one
// queue, largest tables first (BuildQueue). A worker COPYs one range at a time in text format
// (SELECT ... FROM ONLY the table: inheritance children are other tables) and encodes every row
// with the codec package as a snapshot read (op "r") with source LSN C-1, the last commit LSN the
// snapshot contains. A partitioned table is read through its root as one range, and rewrites of
// its partitions are not detected.
//
// Output, on the out channel: change.KindSnapshot units (Export, Attempt, Rows, Records; at most
// Config.BatchRows rows or about Config.BatchBytes bytes each) and, once every range of an export
// has been sent by every worker, exactly one change.KindSnapshotDone unit for that export. Units of
// different exports interleave; a KindSnapshotDone unit always follows every unit of its export.
//
// Table rewrites: each range runs in a savepoint. After its COPY, still holding the range's lock,
// the worker compares the relfilenode the snapshot sees in pg_class with pg_relation_filenode();
// a difference means a rewrite committed after C, so the export is abandoned in this request (no
// KindSnapshotDone) and Hooks.Restart is called. The savepoint is then rolled back, which releases
// the table lock while keeping the transaction's snapshot, so user DDL is never blocked for longer
// than one range.
//
// Errors: a table that is missing, dropped, renamed or unreadable (privilege), or whose rows the
// codec refuses, fails that export alone (Hooks.Failed); the others go on. When no replication slot
// or WAL sender is free, or slot creation waits longer than Config.SlotWaitTimeout for open
// transactions, every export of the request fails with ErrNoReplicationCapacity or a
// *SlotWaitError. Anything else (lost connections, unexpected server errors) ends Run with the
// error; the caller restarts the stage and requests the unfinished exports again. Connection
// strings and passwords never appear in errors or logs.
//
// The publication decides (Config.Publication): every copy, of either kind, reads only the
// columns of the publication's column list and only the rows its row filter passes (PostgreSQL
// 15; pgcat.LoadTable, Table.Published). The Stage reads the definition under its snapshot, as
// pgoutput applies it to the changes that follow (a chunked copy reads it when it sets the
// table up). A list that leaves out a key column fails that export alone
// (pgcat.ErrUnsupportedTable). pgcat.PublishedAs reads every table's definition, for the
// publication poll that notices changes.
//
// Every connection is configured by pgcat (pgcat.ParseConfig), which pins the session settings
// of pgcat.SessionParams, so text renderings of values never depend on database defaults.
package snapshot
