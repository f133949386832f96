// Package testsvc starts and tends the real servers that the integration suite
// (internal/testenv) and the benchmark harness (tools/bench) run against: a PostgreSQL server
// with logical decoding and a single-node Kafka broker, plus the Kafka Connect bits both use, and
// an Apicurio schema registry (StartRegistry).
//
// Servers come either from the environment (CDC_TEST_PG_URL and CDC_TEST_KAFKA_BROKERS, see
// FromEnv) or from local binaries started by scripts/services.sh on free ports of 127.0.0.1 in a
// state folder of their own (Start). Both callers decide what a missing server means: testenv
// skips, or fails under CI=true; the bench fails.
//
// The database helpers (CreateDB, DropDB) give each test or scenario a database of its own on a
// shared server, and drop it with its replication slots. DeleteTopics does the same for topics.
// Errors never carry a URL's password (Redact).
//
// The package takes no testing.TB: callers wrap its errors in their own way.
package testsvc
