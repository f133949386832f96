// Package pipeline wires the stages of Tidemark together and owns each export's lifecycle.
//
//	                      publication poll ─┐        ┌─ resnapshot (HTTP, cdc resnapshot)
//	                                        ▼        ▼
//	snapshot.Stage / Chunker ── reports ──► lifecycle ◄── durable units ── sink
//	        ▲                               │   │  ▲
//	        └──── requests, chunk jobs ─────┘   │  └── Confirmable, KeyColumns ── replication
//	                                            └──── typed commands ─────────► replication
//
//	replication ──┐
//	              ├─► units (bounded channels, stream first) ─► sink ─► Kafka
//	snapshot ─────┘
//
// The lifecycle owner (lifecycle.go) is the one place that knows where each export is: its phase
// (holding, copying, releasing, chunking, hydrated, removing, removed, failed; see phase) and,
// behind the same mutex, the watermark tracker. Every event that moves an export reaches it:
// the publication as polled, the snapshot stage's and the chunker's reports, the units the sink
// made durable, a re-copy asked for by an operator. It answers with commands to the stages
// through narrow interfaces (replicationControl, chunkControl, topicControl, catalog), so its
// unit tests run it against fakes. The stages never call one another.
//
// Exports are the rows of pg_publication_tables, so a renamed table is the old export removed
// and a new one added (copied into the new name's topic), and a partitioned table is one export
// per leaf partition, or one for the root under publish_via_partition_root. A root's partitions
// change without a row change in the stream (ATTACH, DETACH): the poller also reads each
// published root's leaf partitions, and when they changed the lifecycle copies the root again
// with the copy strategy, whose reconcile deletes the keys of a detached partition from the
// topic (partitions in lifecycle.go). Likewise the poller reads each table's column list and
// row filter: when one differs from what the export's copy read (kept in its watermark records,
// so also across a restart) the table is copied again the same way (publication.go).
//
// What else is here is wiring: Pipeline.Run checks PostgreSQL and Kafka, restores the tracker
// from the watermark topic, starts the stages under one errgroup (replication, snapshot,
// chunker, poller, reconciles, sink) and retries the whole pipeline with capped exponential
// backoff on transient errors. Nothing is lost by a retry: the slot is confirmed only up to what
// Kafka holds, hydrated exports and chunked copies resume from their own position, and copies
// of the copy strategy start over. Errors that need a person (bad settings on the server, a
// lost slot, a fenced producer) end Run. Slot and publication administration belongs to the
// replication stage (replication.CreateSlot, ...); the HTTP endpoints and `cdc watermarks` live
// in cmd/cdc.
package pipeline
