// Package httpapi is cdc's HTTP surface (CDC_HTTP_ADDR): the probes (/healthz, /readyz), the
// exports' states (/exports), Prometheus metrics (/metrics), the status page (/, /status,
// /status/lag) and, behind the admin token, a table's re-copy and Go's profiles.
//
// Inputs: the running pipeline.Pipeline (its readiness, exports, failover state and metrics;
// Resnapshot), a Config (token, pprof, timeouts) that cmd/cdc reads from the environment, and
// for the status page a StatusBoard. Output: the answers; the only state it changes is a
// re-copy request, which the pipeline's owner decides on.
//
// The StatusBoard samples, every 5 s, what the pipeline does not know itself: the server's WAL
// position, the slot's retained WAL, whether PostgreSQL and Kafka answer (on one connection
// and one client of its own), and per export the lag behind the server's WAL (kept for 15
// minutes) and the copy rate. Its sampling runs until the context of Run ends.
//
// Guarantees: every request is bounded (header, body, answer, idle connection); error texts,
// which can quote row values, are redacted without the admin token, and a wrong token is
// refused rather than given less; a state-changing request must have a shape no browser sends
// cross-site (auth.go). The status page loads nothing from elsewhere (status/, embedded).
// The answers' shapes and texts are an interface: probes, `cdc health`, `cdc resnapshot` and
// the integration tests read them.
package httpapi
