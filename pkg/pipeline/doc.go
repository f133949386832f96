// Package pipeline wires the stages of Tidemark together: it checks PostgreSQL and Kafka, owns
// the watermark tracker (behind one mutex), and runs the replication stage, the snapshot stage,
// the publication poller and the sink under one errgroup.
//
// It is the only package that imports every stage. The stages meet here:
//
//	replication ──┐
//	              ├─► units (bounded channel, stream order) ─► sink ─► Kafka
//	snapshot ─────┘                                            │
//	                       tracker ◄── Durable/Committed ──────┘
//	                          │
//	                          └──► Confirmable ─► replication status updates
//
// Run retries the whole pipeline with capped exponential backoff on transient errors (a lost
// connection, an unavailable broker). Nothing is lost by a retry: the slot is confirmed only up
// to what Kafka holds, hydrated exports resume from their own position and hydrating ones take a
// new snapshot. Errors that need a person (bad settings on the server, a lost slot, a fenced
// producer) end Run.
package pipeline
