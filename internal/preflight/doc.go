// Package preflight is `cdc check`: before cdc runs, it says whether PostgreSQL and Kafka give
// it what it needs, one line per prerequisite, each failure or warning with its fix.
//
// Inputs: the validated pipeline.Config, the connections' TLS postures (internal/posture) and
// the schema registry's schemareg.Config, all from cmd/cdc's configuration; a writer for the report. Output: the report, and whether
// every check passed (Run, Check); warnings (a posture short of verified TLS, new topics on one
// replica, no reachable standby to read a failover slot's copy on) do not fail it.
//
// What it reads: the server's settings, the role, replication capacity, the publication and
// its tables, the slot, and with a failover slot or a standby source the set-up on both
// servers (failover.go, standby.go); on Kafka the brokers, whether topics may be created, the
// transaction coordinator in exactly-once mode, and the replication of cdc's topics and of the
// transaction state log (replication.go); with CDC_SCHEMA_REGISTRY_URL, how the registry is
// reached, whether it answers and takes the credentials, and its compatibility level
// (registry.go, GET /config only). WaitFailoverReady (`cdc check
// --wait-failover-ready`) polls a standby until its copy of the slot is failover-ready.
//
// It changes nothing on either side: it reads catalogs and metadata, and asks Kafka to
// validate a topic creation without creating it. The report's text and the exit codes cmd/cdc
// maps it to are an interface: scripts and the integration tests read them.
package preflight
