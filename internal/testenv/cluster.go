package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/cdc/internal/testsvc"
)

// ClusterOptions tunes StartCluster. The zero value is a production-like cluster: three nodes,
// default.replication.factor=3, min.insync.replicas=2, internal topics with three replicas.
type ClusterOptions struct {
	// Nodes is the number of combined broker+controller nodes (default 3). Every node votes in
	// the controller quorum.
	Nodes int
	// DefaultReplicationFactor is the brokers' default.replication.factor (default: Nodes, at
	// most 3); MinInsyncReplicas their min.insync.replicas (default 2 when the cluster has
	// three or more nodes, else 1).
	DefaultReplicationFactor int
	MinInsyncReplicas        int
	// InternalReplicationFactor is the replication factor of __transaction_state and
	// __consumer_offsets (default: DefaultReplicationFactor), with transaction.state.log.min.isr
	// min(2, it).
	InternalReplicationFactor int
	// Heap is each node's JVM flags (default ClusterHeap).
	Heap []string
	// AdvertisedPorts maps a node id to the port that node advertises to clients on 127.0.0.1
	// instead of its own client port: a test puts a proxy there (forwarding to the node's Port)
	// so that every client connection to that node, not only a bootstrap one, goes through it.
	// Traffic between the nodes stays direct (their INTERNAL listener).
	AdvertisedPorts map[int32]int
}

// ClusterHeap is the JVM flags of a cluster node in tests: three of them and the test's other
// servers share a two-core machine.
var ClusterHeap = []string{"-Xms128m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}

// Cluster is a Kafka cluster of one test: combined broker+controller KRaft nodes on 127.0.0.1,
// started from the jars that scripts/services.sh installed (the same Kafka as the single-broker
// suites). The test may kill (SIGKILL) and restart any node; a restarted node keeps its data
// folder, so it comes back with its logs, transaction state and metadata, as after a crash.
// Every node still running is stopped at cleanup; the nodes' folders (logs in node-N/kafka.log)
// are kept when the test failed and CDC_TEST_KEEP_STATE=1.
type Cluster struct {
	t     testing.TB
	Dir   string
	Nodes []*ClusterNode
	// StartedIn is how long the first start of all nodes took, until each logged that it started.
	StartedIn time.Duration

	lib  string
	heap []string
}

// ClusterNode is one node of a Cluster.
type ClusterNode struct {
	ID   int32
	Dir  string
	Port int // the PLAINTEXT client listener
	// InternalPort is the inter-broker listener; a client that bootstraps there is told the
	// nodes' internal addresses, so it bypasses the proxies of AdvertisedPorts.
	InternalPort   int
	ControllerPort int
	// AdvertisedPort is the port clients are sent to (Port unless ClusterOptions.AdvertisedPorts
	// names another).
	AdvertisedPort int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Addr is the node's client listener, host:port.
func (n *ClusterNode) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// InternalAddr is the node's inter-broker listener, host:port.
func (n *ClusterNode) InternalAddr() string { return "127.0.0.1:" + strconv.Itoa(n.InternalPort) }

// StartCluster starts the cluster, waits until every node has started and the controller quorum
// has a leader, and stops it at cleanup. It skips under -short and fails the test when the
// cluster cannot start (the Kafka jars come from `scripts/services.sh install`).
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: integration test skipped in -short mode")
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.DefaultReplicationFactor == 0 {
		opts.DefaultReplicationFactor = min(opts.Nodes, 3)
	}
	if opts.MinInsyncReplicas == 0 {
		opts.MinInsyncReplicas = 1
		if opts.Nodes >= 3 {
			opts.MinInsyncReplicas = 2
		}
	}
	if opts.InternalReplicationFactor == 0 {
		opts.InternalReplicationFactor = opts.DefaultReplicationFactor
	}
	if opts.Heap == nil {
		opts.Heap = ClusterHeap
	}
	root, err := testsvc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	lib, err := kafkaLib(root)
	if err != nil {
		t.Fatalf("testenv: Kafka jars: %v", err)
	}
	ports, err := testsvc.FreePorts(3 * opts.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "tidemark-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, Dir: dir, lib: lib, heap: opts.Heap}
	var voters []string
	for i := range opts.Nodes {
		n := &ClusterNode{ID: int32(i + 1), Dir: filepath.Join(dir, fmt.Sprintf("node-%d", i+1)),
			Port: ports[3*i], ControllerPort: ports[3*i+1], InternalPort: ports[3*i+2]}
		n.AdvertisedPort = n.Port
		if p, ok := opts.AdvertisedPorts[n.ID]; ok {
			n.AdvertisedPort = p
		}
		c.Nodes = append(c.Nodes, n)
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", n.ID, n.ControllerPort))
	}
	t.Cleanup(func() {
		c.stopAll()
		if t.Failed() && flagSet(os.Getenv, EnvKeepState) {
			fmt.Fprintf(os.Stderr, "testenv: cluster logs kept in %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	clusterID := "dGlkZW1hcmstY2x1c3Rlcg" // 16 bytes, base64url
	txnISR := min(2, opts.InternalReplicationFactor)
	for _, n := range c.Nodes {
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		props := fmt.Sprintf(`process.roles=broker,controller
node.id=%[1]d
controller.quorum.voters=%[2]s
listeners=PLAINTEXT://127.0.0.1:%[3]d,INTERNAL://127.0.0.1:%[10]d,CONTROLLER://127.0.0.1:%[4]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[11]d,INTERNAL://127.0.0.1:%[10]d
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
controller.listener.names=CONTROLLER
log.dirs=%[5]s
num.partitions=1
default.replication.factor=%[6]d
min.insync.replicas=%[7]d
auto.create.topics.enable=false
offsets.topic.replication.factor=%[8]d
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=%[8]d
transaction.state.log.min.isr=%[9]d
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=%[8]d
share.coordinator.state.topic.min.isr=%[9]d
group.initial.rebalance.delay.ms=0
log.cleaner.dedupe.buffer.size=16777216
`, n.ID, strings.Join(voters, ","), n.Port, n.ControllerPort, filepath.Join(n.Dir, "data"),
			opts.DefaultReplicationFactor, opts.MinInsyncReplicas, opts.InternalReplicationFactor, txnISR,
			n.InternalPort, n.AdvertisedPort)
		if err := os.WriteFile(filepath.Join(n.Dir, "server.properties"), []byte(props), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.Dir, "log4j2.properties"), []byte(fmt.Sprintf(`status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = %s
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%%d] %%p %%m (%%c)%%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
`, filepath.Join(n.Dir, "kafka.log"))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	// Format the nodes one after another (each JVM start is a second or two of CPU), then
	// start them together: a node waits for a quorum of voters before it can start.
	for _, n := range c.Nodes {
		args := append(append([]string(nil), c.heap...), "-Dlog4j2.configurationFile="+filepath.Join(n.Dir, "log4j2.properties"),
			"-cp", filepath.Join(lib, "*"), "kafka.tools.StorageTool", "format", "-t", clusterID,
			"-c", filepath.Join(n.Dir, "server.properties"))
		if out, err := exec.Command("java", args...).CombinedOutput(); err != nil {
			t.Fatalf("testenv: format cluster node %d: %v\n%s", n.ID, err, out)
		}
	}
	for _, n := range c.Nodes {
		c.launch(n)
	}
	for _, n := range c.Nodes {
		c.waitStarted(n, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.waitController(ctx); err != nil {
		t.Fatalf("testenv: cluster: %v", err)
	}
	c.StartedIn = time.Since(start)
	fmt.Fprintf(os.Stderr, "testenv: Kafka cluster of %d nodes (%s) ready in %s\n", len(c.Nodes),
		strings.Join(c.Brokers(), ","), c.StartedIn.Round(100*time.Millisecond))
	return c
}

// Brokers are the nodes' client listeners, for seeds.
func (c *Cluster) Brokers() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// DirectBrokers are the nodes' inter-broker listeners: seeds for a test's own clients that must
// not go through the proxies of ClusterOptions.AdvertisedPorts.
func (c *Cluster) DirectBrokers() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.InternalAddr()
	}
	return out
}

// Node returns the node with the given id.
func (c *Cluster) Node(id int32) *ClusterNode {
	c.t.Helper()
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	c.t.Fatalf("testenv: cluster has no node %d", id)
	return nil
}

// launch starts n's JVM on its data folder.
func (c *Cluster) launch(n *ClusterNode) {
	c.t.Helper()
	args := append(append([]string(nil), c.heap...), "-Dlog4j2.configurationFile="+filepath.Join(n.Dir, "log4j2.properties"),
		"-cp", filepath.Join(c.lib, "*"), "kafka.Kafka", filepath.Join(n.Dir, "server.properties"))
	cmd := exec.Command("java", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	out, err := os.OpenFile(filepath.Join(n.Dir, "kafka.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		c.t.Fatalf("testenv: start cluster node %d: %v", n.ID, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
}

// waitStarted waits until n's log says it started for the (starts+1)th time since the log began.
func (c *Cluster) waitStarted(n *ClusterNode, starts int) {
	c.t.Helper()
	logFile := filepath.Join(n.Dir, "kafka.log")
	deadline := time.Now().Add(2 * time.Minute)
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	for {
		b, _ := os.ReadFile(logFile)
		if strings.Count(string(b), "Kafka Server started") > starts {
			return
		}
		select {
		case <-done:
			o, _ := os.ReadFile(filepath.Join(n.Dir, "kafka.out"))
			c.t.Fatalf("testenv: cluster node %d exited during start-up:\n%s\n%s", n.ID, testsvc.Tail(string(b), 30), testsvc.Tail(string(o), 20))
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("testenv: cluster node %d did not start within 2 minutes:\n%s", n.ID, testsvc.Tail(string(b), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Running reports whether node id's JVM is alive.
func (c *Cluster) Running(id int32) bool {
	n := c.Node(id)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Kill kills node id's JVM with SIGKILL and waits until it is gone: an honest crash.
func (c *Cluster) Kill(id int32) {
	c.t.Helper()
	n := c.Node(id)
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		c.t.Fatalf("testenv: cluster node %d is not running", id)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("testenv: cluster node %d still alive 30s after SIGKILL", id)
	}
}

// Stop stops node id's JVM with SIGTERM, a controlled shutdown (its partitions' leadership moves
// to other nodes first), and waits until it is gone; after 2 minutes it fails the test.
func (c *Cluster) Stop(id int32) {
	c.t.Helper()
	n := c.Node(id)
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		c.t.Fatalf("testenv: cluster node %d is not running", id)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		c.t.Fatalf("testenv: cluster node %d still alive 2 minutes after SIGTERM", id)
	}
}

// Restart starts node id again on its data folder (after Kill or Stop) and returns once its log says it
// started.
func (c *Cluster) Restart(id int32) {
	c.t.Helper()
	if c.Running(id) {
		c.t.Fatalf("testenv: cluster node %d is still running", id)
	}
	n := c.Node(id)
	b, _ := os.ReadFile(filepath.Join(n.Dir, "kafka.log"))
	starts := strings.Count(string(b), "Kafka Server started")
	c.launch(n)
	c.waitStarted(n, starts)
}

// stopAll stops every running node: SIGTERM, then SIGKILL after 20 s.
func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		n.mu.Lock()
		cmd, done := n.cmd, n.done
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}()
	}
	wg.Wait()
}

// RSS returns the resident set size of node id's JVM in bytes (0 when it is not running).
func (c *Cluster) RSS(id int32) int64 {
	n := c.Node(id)
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil || !c.Running(id) {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

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

// ActiveController returns the leader of the controller quorum (DescribeQuorum on the
// __cluster_metadata partition, which a broker forwards to the controllers).
func (c *Cluster) ActiveController(ctx context.Context, cl *kgo.Client) (int32, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rp := kmsg.NewDescribeQuorumRequestTopicPartition()
	rp.Partition = 0
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return -1, err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return -1, err
			}
			if p.LeaderID >= 0 {
				return p.LeaderID, nil
			}
		}
	}
	return -1, errors.New("the controller quorum has no leader")
}

// waitController waits until the quorum has a leader and returns it.
func (c *Cluster) waitController(ctx context.Context) (int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.DirectBrokers()...))
	if err != nil {
		return -1, err
	}
	defer cl.Close()
	for {
		id, err := c.ActiveController(ctx, cl)
		if err == nil {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no active controller: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
