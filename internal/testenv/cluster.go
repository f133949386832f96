package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testsvc"
)

// ClusterOptions tunes StartCluster (testsvc.ClusterOptions: the zero value is three nodes,
// default.replication.factor=3, min.insync.replicas=2, internal topics with three replicas).
type ClusterOptions = testsvc.ClusterOptions

// ClusterNode is one node of a Cluster.
type ClusterNode = testsvc.ClusterNode

// ClusterHeap is the JVM flags of a cluster node in tests.
var ClusterHeap = testsvc.ClusterHeap

// Cluster is a Kafka cluster of one test (testsvc.Cluster: combined broker+controller KRaft
// nodes on 127.0.0.1, from the jars that scripts/services.sh installed). The test may kill
// (SIGKILL) and restart any node; a restarted node keeps its data folder, so it comes back with
// its logs, transaction state and metadata, as after a crash. Every node still running is
// stopped at cleanup; the nodes' folders (logs in node-N/kafka.log) are kept when the test
// failed and CDC_TEST_KEEP_STATE=1.
type Cluster struct {
	*testsvc.Cluster
	t testing.TB
}

// StartCluster starts the cluster, waits until every node has started and the controller quorum
// has a leader, and stops it at cleanup. It skips under -short and fails the test when the
// cluster cannot start (the Kafka jars come from `scripts/services.sh install`).
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: integration test skipped in -short mode")
	}
	sc, err := testsvc.StartCluster(context.Background(), opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	c := &Cluster{Cluster: sc, t: t}
	t.Cleanup(func() {
		sc.StopAll()
		if t.Failed() && flagSet(os.Getenv, EnvKeepState) {
			fmt.Fprintf(os.Stderr, "testenv: cluster logs kept in %s\n", sc.Dir)
			return
		}
		_ = os.RemoveAll(sc.Dir)
	})
	fmt.Fprintf(os.Stderr, "testenv: Kafka cluster of %d nodes (%s) ready in %s\n", len(sc.Nodes),
		strings.Join(sc.Brokers(), ","), sc.StartedIn.Round(100*time.Millisecond))
	return c
}

// Node returns the node with the given id.
func (c *Cluster) Node(id int32) *ClusterNode {
	c.t.Helper()
	n, err := c.FindNode(id)
	if err != nil {
		c.t.Fatalf("testenv: %v", err)
	}
	return n
}

// Running reports whether node id's JVM is alive.
func (c *Cluster) Running(id int32) bool { return c.Node(id).Running() }

// Kill kills node id's JVM with SIGKILL and waits until it is gone: an honest crash.
func (c *Cluster) Kill(id int32) {
	c.t.Helper()
	if err := c.Node(id).Signal(syscall.SIGKILL, 30*time.Second); err != nil {
		c.t.Fatalf("testenv: %v", err)
	}
}

// Stop stops node id's JVM with SIGTERM, a controlled shutdown (its partitions' leadership moves
// to other nodes first), and waits until it is gone; after 2 minutes it fails the test.
func (c *Cluster) Stop(id int32) {
	c.t.Helper()
	if err := c.Node(id).Signal(syscall.SIGTERM, 2*time.Minute); err != nil {
		c.t.Fatalf("testenv: %v", err)
	}
}

// Restart starts node id again on its data folder (after Kill or Stop) and returns once its log
// says it started.
func (c *Cluster) Restart(id int32) {
	c.t.Helper()
	n := c.Node(id)
	if n.Running() {
		c.t.Fatalf("testenv: cluster node %d is still running", id)
	}
	starts := n.Starts()
	if err := c.Launch(n); err != nil {
		c.t.Fatalf("testenv: %v", err)
	}
	if err := c.WaitStarted(n, starts); err != nil {
		c.t.Fatalf("testenv: %v", err)
	}
}

// RSS returns the resident set size of node id's JVM in bytes (0 when it is not running).
func (c *Cluster) RSS(id int32) int64 { return c.Node(id).RSS() }

// Client returns a client of the cluster, closed at cleanup. It reaches every node directly
// (DirectBrokers), never through a proxy of ClusterOptions.AdvertisedPorts.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.DirectBrokers()...)}, opts...)...)
	if err != nil {
		t.Fatalf("testenv: cluster client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client of the cluster, closed at cleanup.
func (c *Cluster) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(c.Client(t, kgo.MetadataMinAge(100*time.Millisecond)))
}

// Leader returns the leader of topic's partition, as the metadata says now.
func (c *Cluster) Leader(ctx context.Context, adm *kadm.Client, topic string, partition int32) (int32, error) {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return -1, err
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return -1, fmt.Errorf("topic %s: %v", topic, td.Err)
	}
	p, ok := td.Partitions[partition]
	if !ok {
		return -1, fmt.Errorf("topic %s has no partition %d", topic, partition)
	}
	if p.Leader < 0 {
		return -1, fmt.Errorf("topic %s partition %d has no leader (%v)", topic, partition, p.Err)
	}
	return p.Leader, nil
}

// TxnCoordinator returns the broker that coordinates transactional id txnID.
func (c *Cluster) TxnCoordinator(ctx context.Context, adm *kadm.Client, txnID string) (int32, error) {
	rs := adm.FindTxnCoordinators(ctx, txnID)
	r, ok := rs[txnID]
	if !ok {
		return -1, fmt.Errorf("no coordinator answer for %s", txnID)
	}
	if r.Err != nil {
		return -1, fmt.Errorf("find coordinator of %s: %w", txnID, r.Err)
	}
	return r.NodeID, nil
}

// ActiveController returns the leader of the controller quorum.
func (c *Cluster) ActiveController(ctx context.Context, cl *kgo.Client) (int32, error) {
	return testsvc.ActiveController(ctx, cl)
}
