// Package posture says how a connection of Tidemark's commands is protected, as their
// configuration decides it, before anything connects: for PostgreSQL (cdc's source, its
// primary, tidemark-apply's target) the sslmode a parsed pgx configuration amounts to, and for
// Kafka whether TLS is on and whether SASL credentials would cross the network without it.
//
// Inputs: a *pgconn.Config (pgx's parse of the connection string) or a kafkaconn.Security. Output: a
// Posture per connection, with one line for people (Summary), what is at risk (Warning) and the
// fix. The commands log the postures at start (Log), print them (cdc check, cdc's status page),
// and, when the operator requires TLS (CDC_REQUIRE_TLS, APPLY_REQUIRE_TLS), refuse every posture
// that Refused reports, as a configuration problem.
//
// Classification only: nothing here dials, and no posture holds a secret.
package posture
