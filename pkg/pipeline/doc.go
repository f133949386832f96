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
