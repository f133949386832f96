// Package monitor samples what the pipeline's metrics report beside its own state: the
// server's WAL position (for the watermarks' lag in bytes and seconds), the slot's WAL retention
// and, for a failover slot, whether the standby's copy is failover-ready. It samples on
// connections of its own, every five seconds, for the whole of the pipeline's run, across its
// restarts; the pipeline wires it (pipeline.New) and gives it a Source to read its exports from.
package monitor
