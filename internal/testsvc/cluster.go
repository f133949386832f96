package testsvc

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
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// withDefaults fills in the zero fields.
func (o ClusterOptions) withDefaults() ClusterOptions {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.DefaultReplicationFactor == 0 {
		o.DefaultReplicationFactor = min(o.Nodes, 3)
	}
	if o.MinInsyncReplicas == 0 {
		o.MinInsyncReplicas = 1
		if o.Nodes >= 3 {
			o.MinInsyncReplicas = 2
		}
	}
	if o.InternalReplicationFactor == 0 {
		o.InternalReplicationFactor = o.DefaultReplicationFactor
	}
	if o.Heap == nil {
		o.Heap = ClusterHeap
	}
	return o
}

// Cluster is a Kafka cluster of combined broker+controller KRaft nodes on 127.0.0.1, started
// from the jars that scripts/services.sh installed (the same Kafka as the single broker). Any
// node may be killed (SIGKILL) and restarted; a restarted node keeps its data folder, so it
// comes back with its logs, transaction state and metadata, as after a crash.
type Cluster struct {
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

// proc returns the node's process and the channel closed when it exits (nil, nil before its
// first launch).
func (n *ClusterNode) proc() (*exec.Cmd, chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd, n.done
}

// KafkaLib is the folder of the installed Kafka jars.
func KafkaLib() (string, error) {
	cache := CacheDir()
	matches, _ := filepath.Glob(filepath.Join(cache, "kafka-*", "lib"))
	if len(matches) == 0 {
		return "", fmt.Errorf("no Kafka jars under %s: run scripts/services.sh install", cache)
	}
	return matches[len(matches)-1], nil
}

// StartCluster writes the nodes' settings in a new folder, formats and starts them, and waits
// until every node has started and the controller quorum has a leader. On an error, whatever
// started is stopped and the folder removed. The caller stops the cluster with StopAll and
// removes Dir.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	opts = opts.withDefaults()
	lib, err := KafkaLib()
	if err != nil {
		return nil, err
	}
	ports, err := FreePorts(3 * opts.Nodes)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tidemark-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, lib: lib, heap: opts.Heap}
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
	if err := c.start(ctx, opts, voters); err != nil {
		c.StopAll()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// start writes the settings, formats the nodes and starts them.
func (c *Cluster) start(ctx context.Context, opts ClusterOptions, voters []string) error {
	for _, n := range c.Nodes {
		if err := c.writeSettings(n, opts, voters); err != nil {
			return err
		}
	}
	start := time.Now()
	// Format the nodes one after another (each JVM start is a second or two of CPU), then
	// start them together: a node waits for a quorum of voters before it can start.
	const clusterID = "dGlkZW1hcmstY2x1c3Rlcg" // 16 bytes, base64url
	for _, n := range c.Nodes {
		args := append(append([]string(nil), c.heap...), "-Dlog4j2.configurationFile="+filepath.Join(n.Dir, "log4j2.properties"),
			"-cp", filepath.Join(c.lib, "*"), "kafka.tools.StorageTool", "format", "-t", clusterID,
			"-c", filepath.Join(n.Dir, "server.properties"))
		if out, err := exec.CommandContext(ctx, "java", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("format cluster node %d: %v\n%s", n.ID, err, out)
		}
	}
	for _, n := range c.Nodes {
		if err := c.Launch(n); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := c.WaitStarted(n, 0); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := c.waitController(wctx); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	c.StartedIn = time.Since(start)
	return nil
}

// writeSettings writes n's server.properties and log4j2.properties.
func (c *Cluster) writeSettings(n *ClusterNode, opts ClusterOptions, voters []string) error {
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
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
		opts.DefaultReplicationFactor, opts.MinInsyncReplicas, opts.InternalReplicationFactor, min(2, opts.InternalReplicationFactor),
		n.InternalPort, n.AdvertisedPort)
	if err := os.WriteFile(filepath.Join(n.Dir, "server.properties"), []byte(props), 0o600); err != nil {
		return err
	}
	return WriteKafkaLog4j(filepath.Join(n.Dir, "log4j2.properties"), filepath.Join(n.Dir, "kafka.log"))
}

// WriteKafkaLog4j writes a log4j2 configuration at path that sends a Kafka JVM's log, INFO and
// above, to logFile.
func WriteKafkaLog4j(path, logFile string) error {
	return os.WriteFile(path, []byte(fmt.Sprintf(`status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = %s
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%%d] %%p %%m (%%c)%%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
`, logFile)), 0o600)
}

// Brokers are the nodes' client listeners, for seeds.
func (c *Cluster) Brokers() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// DirectBrokers are the nodes' inter-broker listeners: seeds for clients that must not go
// through the proxies of ClusterOptions.AdvertisedPorts.
func (c *Cluster) DirectBrokers() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.InternalAddr()
	}
	return out
}

// FindNode returns the node with the given id.
func (c *Cluster) FindNode(id int32) (*ClusterNode, error) {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n, nil
		}
	}
	return nil, fmt.Errorf("cluster has no node %d", id)
}

// Launch starts n's JVM on its data folder.
func (c *Cluster) Launch(n *ClusterNode) error {
	args := append(append([]string(nil), c.heap...), "-Dlog4j2.configurationFile="+filepath.Join(n.Dir, "log4j2.properties"),
		"-cp", filepath.Join(c.lib, "*"), "kafka.Kafka", filepath.Join(n.Dir, "server.properties"))
	cmd := exec.Command("java", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	out, err := os.OpenFile(filepath.Join(n.Dir, "kafka.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start cluster node %d: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return nil
}

// Starts counts how often n's log says it started.
func (n *ClusterNode) Starts() int {
	b, _ := os.ReadFile(filepath.Join(n.Dir, "kafka.log"))
	return strings.Count(string(b), "Kafka Server started")
}

// WaitStarted waits until n's log says it started for the (starts+1)th time since the log began.
func (c *Cluster) WaitStarted(n *ClusterNode, starts int) error {
	logFile := filepath.Join(n.Dir, "kafka.log")
	deadline := time.Now().Add(2 * time.Minute)
	_, done := n.proc()
	for {
		b, _ := os.ReadFile(logFile)
		if strings.Count(string(b), "Kafka Server started") > starts {
			return nil
		}
		select {
		case <-done:
			o, _ := os.ReadFile(filepath.Join(n.Dir, "kafka.out"))
			return fmt.Errorf("cluster node %d exited during start-up:\n%s\n%s", n.ID, Tail(string(b), 30), Tail(string(o), 20))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster node %d did not start within 2 minutes:\n%s", n.ID, Tail(string(b), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Running reports whether n's JVM is alive.
func (n *ClusterNode) Running() bool {
	_, done := n.proc()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Signal sends sig to n's JVM and waits up to wait for it to exit.
func (n *ClusterNode) Signal(sig syscall.Signal, wait time.Duration) error {
	cmd, done := n.proc()
	if cmd == nil {
		return fmt.Errorf("cluster node %d is not running", n.ID)
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("cluster node %d still alive %s after %s", n.ID, wait, sig)
	}
}

// StopAll stops every running node: SIGTERM, then SIGKILL after 20 s.
func (c *Cluster) StopAll() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		cmd, done := n.proc()
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

// RSS returns the resident set size of n's JVM in bytes (0 when it is not running).
func (n *ClusterNode) RSS() int64 {
	cmd, _ := n.proc()
	if cmd == nil || !n.Running() {
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

// Pid is n's JVM's process id (0 when it was never launched).
func (n *ClusterNode) Pid() int {
	cmd, _ := n.proc()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

// ActiveController returns the leader of the controller quorum (DescribeQuorum on the
// __cluster_metadata partition, which a broker forwards to the controllers).
func ActiveController(ctx context.Context, cl *kgo.Client) (int32, error) {
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
		id, err := ActiveController(ctx, cl)
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
