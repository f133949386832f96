// Package testenv gives integration tests a real PostgreSQL (wal_level=logical) and a real Kafka
// broker, once per test binary.
//
// Services come from the first source that works, in this order:
//
//  1. The environment: CDC_TEST_PG_URL (a PostgreSQL URL) and CDC_TEST_KAFKA_BROKERS (comma-separated
//     host:port list). `eval "$(scripts/services.sh up)"` sets both for the servers of `make up`.
//  2. testcontainers-go, when a Docker engine answers a ping within a few seconds: postgres:15 with
//     logical decoding and a Redpanda broker. Any failure to start counts as "not available".
//     CDC_TEST_NO_DOCKER=1 skips this source.
//  3. Local binaries: `scripts/services.sh up` with a private state folder and free ports picked at
//     run time, so a test binary never collides with `make up` or with another test binary. They
//     are stopped (and their state removed) when the test binary ends; if it dies first, a watchdog
//     started by services.sh tears them down. When tests fail, the state folder (server logs) is
//     kept and its path printed.
//
// CDC_TEST_PG_VERSION (15, 17) names the PostgreSQL major version to run against: sources 2 and
// 3 start that version (3 through scripts/services.sh's TIDEMARK_PG_VERSION, which fetches 17 with
// scripts/postgresql-17.sh), and a server of another version, from any source, fails every test.
// PGMajor tells a test the version it runs against.
//
// Services start lazily, on the first call to PGURL, Brokers or a helper built on them, so a test
// binary that runs no integration test (go test -run '^$' -bench .) starts nothing.
//
// When no source works, tests skip with the reason; with CI=true or CDC_TEST_REQUIRE=1 they fail
// instead, so that CI never passes by skipping. With -short, tests that ask for services skip.
//
// Usage:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		db := testenv.NewDB(t) // fresh database, dropped with its replication slots at cleanup
//		testenv.Exec(t, db, "CREATE TABLE t (id int PRIMARY KEY)")
//		prefix := testenv.NewTopicPrefix(t) // topics named prefix.* are deleted at cleanup
//		brokers := testenv.Brokers(t)
//		...
//	}
//
// The services of one test binary are shared by its tests: isolate with NewDB and
// NewTopicPrefix rather than with fixed names.
//
// A schema registry is acquired apart, on the first call to Registry: CDC_TEST_SCHEMA_REGISTRY_URL,
// or an Apicurio Registry that `scripts/services.sh registry-up` starts (it needs a Java of 21 or
// later, which services.sh finds). StartRegistry gives a test a registry of its own to stop and
// start, over HTTPS if asked. Both skip, or fail under CI=true, as the other services do.
package testenv
