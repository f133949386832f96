// Package fault is a fault-injection suite: it runs the built cdc binary against a PostgreSQL
// server and a Kafka broker of its own (internal/testenv.StartPrivate), under a random
// concurrent workload, and meanwhile kills cdc with SIGKILL, kills and restarts the broker,
// crash-restarts PostgreSQL and cuts cdc's connections through TCP proxies. It then checks the
// invariants: every topic materialised by key equals its table, no watermark ever moved
// backwards, the slot was never confirmed past what Kafka held, and in exactly-once mode no
// change was published twice.
//
// TestCluster (cluster_test.go) does the same against a three-node Kafka cluster of its own
// (testenv.StartCluster): it kills a partition leader, the transaction coordinator, the active
// controller, and two of three nodes at once, and checks the same invariants after each, with
// tidemark-apply keeping a replica that must equal the source and never be torn (a bank table's
// sum). TestClusterRolling (clusterrolling_test.go) restarts the three nodes one after another
// while a table of 200,000 rows copies, then cuts one node off from cdc silently for 2 minutes
// through a proxy the node advertises to clients. TestKafkaDeadPath (deadpath_test.go) starts
// cdc against a broker that accepts connections and never answers, then turns a running cdc's
// broker into one, and reports when cdc noticed and what it said.
//
// TestTopicCreationHeldBack (heldtopics_test.go) adds a table to the publication while a
// HoldProxy in front of the broker holds back every CreateTopics request for 30 s, and checks that
// the tables already streaming keep a watermark lag under 1 s at the 99th percentile meanwhile.
//
// The non-test part of the package is the TCP proxies the suite puts between cdc and the servers:
// Proxy, which cuts, stalls and swallows connections, and HoldProxy, which reads Kafka request frames and
// holds back those of chosen API keys.
//
// Run it with
//
//	go test -count=1 -timeout 15m ./integration/fault/
//
// CDC_FAULT_SEED fixes the random workload and fault schedule (the seed is printed).
package fault
