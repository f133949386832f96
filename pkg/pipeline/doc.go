// Package pipeline wires the stages of Tidemark together and owns each export's life.
//
//	poller ─────────── evPolled ──────────┐   ┌── evResnapshot (HTTP, cdc resnapshot)
//	snapshot.Stage ─ evBegin/Restart/Failed ┐ │   │
//	Chunker ───────── evFailed ────────────┐│ │   │
//	reconciler ─ evReconciled/evFailed ───┐││ │   │
//	                                      ▼▼▼ ▼   ▼
//	                                   owner (one goroutine: phases, tracker)
//	       ┌─ acks (produced, durable, committed) ─────┘ │ ▲
//	      sink ◄─ records to write (reply, as data) ─────┘ │
//	                    commands: Detect, SetConsistentPoint, CopyDone, Remove, Fail, Restart,
//	                    StartChunking, Confirm ──► replication; Add, Stop ──► Chunker;
//	                    Request ──► snapshot.Stage; jobs ──► reconciler
//
//	replication ──┐                                 Chunker ── windows, chunks ──► replication
//	reconciler ───┼─► units (bounded, stream first) ─► sink ─► Kafka
//	snapshot ─────┘
//
// The owner (owner.go) is one goroutine that keeps every export's phase (holding, copying,
// releasing, chunking, hydrated, removing, removed, failed; phase.go) and the watermark tracker.
// No other goroutine touches that state, so nothing is locked: every event that moves an export
// reaches it on a channel (the publication as polled, the snapshot stage's and the chunker's
// reports, the reconciles, the sink's acknowledgements, a re-copy asked for by an operator), and
// it answers with typed commands to the stages through narrow interfaces (replicationControl,
// chunkControl, topicControl, catalog), so its unit tests drive its loop with fakes. The phase
// is an export's only lifecycle state: the state its watermark records and GET /exports show is
// read from it (phase.state, which the owner tells the tracker at every transition:
// watermark.Tracker.SetState), and which transitions happen is decided by the phase machine
// alone (phase.go: toHydrated, toRemoved, toFailed, ...). The owner never waits on I/O, nor for
// a stage that may wait for it: the replication stage's commands are posted, and those whose
// outcome matters come back on channels the loop selects on; a poll's catalog reads are the
// poller's (takeIn), topics are made by a topic administrator beside the loop (evTopics), and
// the sink's acknowledgements are served before any other event.
//
// The acknowledgement path runs one way (acks.go): the sink reports what Kafka holds by calling
// its sink.Acker, which ackPort turns into acks on the owner's channel; the owner applies them to the tracker and replies with the records to write
// (watermarks, the quiet record, the checkpoint), as data, in the same batch or Kafka
// transaction. It pushes what the slot may confirm to the replication stage (Confirm). The
// units' byte budgets go back to their stages as change.Claim values the sink returns.
//
// Exports are the rows of pg_publication_tables, so a renamed table is the old export removed
// and a new one added (copied into the new name's topic), and a partitioned table is one export
// per leaf partition, or one for the root under publish_via_partition_root. A root's partitions
// change without a row change in the stream (ATTACH, DETACH): the poller also reads each
// published root's leaf partitions, and when they changed the owner copies the root again
// with the copy strategy, whose reconcile deletes the keys of a detached partition from the
// topic (partitions in lifecycle.go). Likewise the poller reads each table's column list and
// row filter: when one differs from what the export's copy read (kept in its watermark records,
// so also across a restart) the table is copied again the same way (publication.go).
//
// What else is here is wiring. Pipeline.Life runs one life: start-up (startup.go) checks
// PostgreSQL and Kafka, restores the tracker from the watermark topic, none of whose LSNs may
// pass the end of the server's WAL (restorecheck.go), and checks the slot (a plan); wire
// (wire.go) connects the stages with channels, runs them under one errgroup and stops them in
// order. Nothing is lost when a life ends: the slot is confirmed only up to what Kafka holds,
// hydrated exports and chunked copies resume from their own position, and copies of the copy
// strategy start over. Whether another life starts is cmd/cdc's decision (errors that
// need a person end the service: bad settings on the server, a lost slot, a fenced producer).
// Slot and publication administration belongs to the replication stage (replication.CreateSlot,
// ...); the HTTP endpoints and `cdc watermarks` live in cmd/cdc.
package pipeline
