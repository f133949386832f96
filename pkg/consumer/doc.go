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
// Reader.Next returns the next Cut. A cut at LSN C, following the cut at LSN P, holds every
// change of the joined tables with commit LSN (source.lsn) in [P, C): C is a watermark, an
// exclusive bound, exactly as in the watermark contract ("every change with commit LSN < W lies
// below the record's offsets"). In the issue's words, the cut holds the commit LSNs in
// (P-1, C-1]. Its changes are grouped into source transactions (Txn: commit LSN and txId), the
// transactions in commit order (snapshot rows of a copy first at their LSN), and each
// transaction's changes in source.sequence order. Events (joined, reset, removed, failed) come
// with the cut: empty a joined or reset table before applying the cut's transactions; a removed
// or failed table's last changes are in the cut.
//
// # Guarantees
//
//   - C never passes the effective watermark of a joined table (own, quiet and checkpoint rules
//     applied; an export's effective watermark never moves backwards within one copy attempt).
//     Successive cuts have increasing LSNs; a cut that carries only events may repeat its
//     predecessor's LSN.
//   - A cut never holds a change with commit LSN >= C, and never splits a source transaction,
//     not even one cdc published in pieces across several Kafka transactions: a watermark never
//     covers part of a transaction.
//   - No change is delivered twice: a record is delivered at most once per reader, a change
//     with a commit LSN below the previous cut is dropped (at-least-once re-sends), and a
//     truncate, which cdc writes to every partition, is delivered once.
//   - Lifecycle. A table joins when its watermark record says hydrated, at the first cut whose
//     LSN reaches the watermark it was hydrated at: the cut carries EventJoined and its whole
//     current copy attempt (the rows of the copy, op r, and every change since), read from the
//     attempt's start offsets; start the table from empty. Joining no lower than that watermark
//     matters for chunked copies, whose rows carry their chunks' positions rather than commit
//     LSNs: below it a copy row can show the effect of a transaction whose changes in another
//     table the cut does not hold yet; at or above it, every row of the table is its state at
//     the cut.
//     A new copy attempt of a joined table gives EventReset: the table leaves the cuts at once
//     (its old rows are stale), and joins again, with the new copy, when that is hydrated. A
//     removed or failed table holds the cuts up to its final watermark, then leaves with
//     EventRemoved or EventFailed; the others go on. A truncate is a change (op t) like any
//     other. A table that is not joined (being copied, or not chosen) never holds the cuts back:
//     in independent mode the cuts advance while another table is copied. In global mode cdc
//     itself holds every watermark back during a copy, so the cuts stall with them.
//   - Resume. Cut.Position is the cut's LSN, the offsets below which it was read and the copy
//     attempt of each joined table. Store it (MarshalJSON) with the cut's effects, in the same
//     transaction, and pass it to Config.Resume: the reader goes on exactly after that cut,
//     delivering nothing twice and skipping nothing. That gives exactly-once processing.
//
// # Memory
//
// A cut is built in memory, whole, and covers one watermark step: its LSN is the lowest
// watermark, past the previous cut, of any joined table's records, so a reader that is behind
// catches up in cuts of one step each (at most what a table's watermark record covers), not
// in one cut of everything behind. Past the cut little is read: for a target C, each partition
// of a joined table must be read up to the offsets of that table's first watermark record whose
// watermark reaches C (the reader keeps, per table, the watermark and offsets of each record
// since the last cut: a few bytes per record). A partition that has reached its target is read
// on only while it holds less than Config.HeldBytes (4 MiB) of records past the cut, then paused
// (kgo PauseFetchPartitions), so data held back by a slow table stays in Kafka. What is buffered
// past a cut is at most HeldBytes plus one fetch per partition (kgo.FetchMaxPartitionBytes).
//
// # Limits
//
// Records a compacted data topic has removed are not delivered (the key's later record is). The
// reader needs the record just below each target offset, or any later one, to know it has read a
// partition up to the target: it keeps control records for that (kgo.KeepControlRecords).
package consumer
