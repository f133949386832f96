// Package consumer reads Tidemark's topics as a consumer of several tables wants them: in
// consistent cuts across tables, each holding whole source transactions, in commit order.
//
// # Inputs
//
// The watermark topic (<prefix>.__watermarks: own, quiet and checkpoint records, read through
// watermark.View, the one implementation of the watermark rules) and the data topic of every
// chosen table (Config.Tables; empty means every export named in the watermark topic), in the
// json or json-with-schema format, with any number of partitions. Everything is read
// read-committed through one franz-go client; Config.Opts (TLS, SASL, ...) is passed through, and
// SecurityOpts builds them from the CDC_KAFKA_TLS* and CDC_KAFKA_SASL* variables as cdc reads
// them.
//
// # Outputs
//
// Reader.Read returns parts; Reader.Next returns whole cuts assembled from them. A cut at LSN
// C, following the cut at LSN P, holds every change of the joined tables with commit LSN
// (source.lsn) in [P, C): C is a watermark, an exclusive bound, exactly as in the watermark
// contract ("every change with commit LSN < W lies below the record's offsets"). In the issue's
// words, the cut holds the commit LSNs in (P-1, C-1]. Its changes are grouped into source
// transactions (Txn: commit LSN and txId), the transactions in commit order, and each
// transaction's changes in source.sequence order, a delete before the other op of the same
// sequence (the two halves of a key change). A cut comes in one or more parts (Cut.Part, the
// last one Final with the Position); events (joined, reset, removed, failed) come with its part
// 0. A table that joins is loaded first: its copy's rows and its changes below the watermark it
// was hydrated at come in load parts (Cut.Load set) between cuts, in an order that keeps each
// key's order; the cut that joins it says EventJoined and carries its changes from there on.
// The load takes every copy row below the offsets of the record that said hydrated, whatever
// its position: a chunked copy's rows carry their chunk's low marker, and cdc's stream position
// does not move on the markers, so the last chunk's rows can lie at or above that watermark (no
// change of the table lies between the two: the rows are its state at the watermark).
//
// # Guarantees
//
//   - C never passes the effective watermark of a joined table (own, quiet and checkpoint rules
//     applied; an export's effective watermark never moves backwards within one copy attempt).
//     Successive cuts have increasing LSNs; a cut that carries only events, or only tables that
//     join, may repeat its predecessor's LSN.
//   - A cut never holds a change with commit LSN >= C, and never splits a source transaction,
//     not even one cdc published in pieces across several Kafka transactions: a watermark never
//     covers part of a transaction. (A transaction that touched a table being loaded has that
//     table's part in the load and the rest in the cut that joins it.)
//   - No change is delivered twice: a record is delivered at most once per reader, a change
//     with a commit LSN below the previous cut is dropped (at-least-once re-sends, as is a
//     stream change that a partition repeats below one already taken), and a truncate, which
//     cdc writes to every partition, is delivered once.
//   - Lifecycle. A table joins when its watermark record says hydrated, at the first cut, after
//     its load, whose LSN reaches the watermark it was hydrated at. Joining no lower than that
//     watermark matters for chunked copies, whose rows carry their chunks' positions rather than
//     commit LSNs: below it a copy row can show the effect of a transaction whose changes in
//     another table the cut does not hold yet; at or above it, every row of the table is its
//     state at the cut. Tables loaded at the same time join in one cut: a loaded table waits
//     while another loads (so a consumer can keep all loads in one transaction, committed by
//     the joining cut); the cuts of the joined tables go on meanwhile, taking turns with load
//     parts.
//   - Re-copies. A new copy attempt of a joined table gives EventReset: the table leaves the
//     cuts at once (its old rows are stale), and no cut passes the last one until it joins
//     again with the new copy (Position.Held keeps that across a resume): the other chosen
//     tables never go ahead of it. A removed or failed table holds nothing back and leaves with
//     EventRemoved or EventFailed once the cuts reach its final watermark (a table that leaves
//     while loading also says so: discard its load). A truncate is a change (op t) like any
//     other. A table that is not joined (being copied, or not chosen) never holds the cuts back:
//     in independent mode the cuts advance while another table is copied. In global mode cdc
//     itself holds every watermark back during a copy, so the cuts stall with them.
//   - Resume. Cut.Position is the cut's LSN, the offsets below which it was read, the copy
//     attempt of each joined table and the tables whose re-copy the cuts wait for. Store it
//     (MarshalJSON) with the cut's effects, in the same transaction, and pass it to
//     Config.Resume: the reader goes on exactly after that cut, delivering nothing twice and
//     skipping nothing. Records of earlier copy attempts, read again from the watermark topic,
//     are history. A load under way is not in a position: after a resume it starts again.
//
// # Memory
//
// Independent of table and cut sizes. A partition is fetched while it holds less than
// Config.HeldBytes (4 MiB) of records not yet delivered, then paused (kgo
// PauseFetchPartitions), so data held back by a slow table stays in Kafka; a part holds at most
// Config.PartChanges changes (10,000) or about Config.PartBytes (16 MiB). The reader holds
// about partitions × (HeldBytes + a fetch, kgo.FetchMaxPartitionBytes) + a part. While a table
// loads, it also keeps the table's changes at or above its hydration watermark that lie below
// the hydrated record's offsets (cdc's unacknowledged changes when it said hydrated), because
// copy rows can follow them. A cut covers one watermark step: its LSN is the lowest watermark,
// past the previous cut, of any joined table's records, so a reader that is behind catches up
// in cuts of one step each. Work per change is a k-way merge of the partitions' heads: linear
// in the changes. Next keeps whole cuts, and a joining table's whole load, in memory.
//
// # Limits
//
// Records a compacted data topic has removed are not delivered (the key's later record is). The
// reader needs the record just below each target offset, or any later one, to know it has read a
// partition up to the target: it keeps control records for that (kgo.KeepControlRecords).
package consumer
