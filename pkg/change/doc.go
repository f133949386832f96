// Package change holds the types shared by every stage of the Tidemark pipeline: WAL positions
// (LSN), export identities, table schemas, the encoded Kafka records the stages produce and the
// Unit in which they travel to the sink.
//
// It is a leaf: it imports nothing from the project, so the snapshot, replication, watermark and
// sink packages can all depend on it without depending on each other. The stages meet only in
// pkg/pipeline.
//
// A Unit is the one thing that crosses from a stage to the sink. Units from the replication stage
// arrive in stream order; units from snapshot workers interleave with them. The sink makes units
// durable in the order it receives them, so a durable unit implies every earlier unit is durable.
// That ordering is what lets the watermark tracker derive each export's own position from the
// highest durable stream position.
package change
