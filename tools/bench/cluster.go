package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
)

// The cluster comparison (-cluster, stream scenario) catches the same backlog up exactly-once
// into the single broker and into a three-node KRaft cluster started for it, with cdc at its
// defaults (topics with the cluster's default replication factor, 3, and min.insync.replicas=2,
// so every batch waits for a follower), alternating single and cluster runs (S C C S ...).

// clusterHeap is each cluster node's JVM flags: full JIT like the single broker's, with a third
// of its heap less than its 1 GiB (three nodes and the bench's other servers share the machine).
const clusterHeap = "-Xms512m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20"

// clusterRun is the comparison's result.
type clusterRun struct {
	Nodes             int    `json:"nodes"`
	ReplicationFactor int    `json:"default_replication_factor"`
	MinInsyncReplicas int    `json:"min_insync_replicas"`
	Heap              string `json:"node_jvm"`
	// TopicReplicas is the fewest replicas of a partition of the topics cdc created on the
	// cluster (with its defaults: the broker's default replication factor).
	TopicReplicas int       `json:"topic_replicas"`
	StartSeconds  float64   `json:"start_seconds"`
	RSSMiB        []int64   `json:"node_rss_mib_after_start"`
	Single        []catchUp `json:"single"`
	Cluster       []catchUp `json:"cluster"`
	// Medians of the runs' changes/s (process start -> caught up), and cluster over single.
	SinglePerSecond  float64 `json:"single_changes_per_second"`
	ClusterPerSecond float64 `json:"cluster_changes_per_second"`
	Ratio            float64 `json:"ratio_cluster_to_single"`
	// Medians of cdc's CPU seconds per 1,000,000 changes.
	SingleCPUPerM  float64 `json:"single_cdc_cpu_per_million"`
	ClusterCPUPerM float64 `json:"cluster_cdc_cpu_per_million"`
}

// benchCluster is the running cluster of the comparison and a client of it.
type benchCluster struct {
	c *testsvc.Cluster
	k *kafkaClient
}

// startCluster starts the comparison's cluster.
func (b *bench) startCluster(ctx context.Context) (*benchCluster, *clusterRun, error) {
	b.logf("stream: starting a Kafka cluster of 3 nodes (JVM %q)", clusterHeap)
	c, err := testsvc.StartCluster(ctx, testsvc.ClusterOptions{Heap: strings.Fields(clusterHeap)})
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	k, err := newKafkaClient(c.Brokers(), b.o.benchCodec())
	if err != nil {
		stopCluster(c)
		return nil, nil, err
	}
	run := &clusterRun{Nodes: len(c.Nodes), ReplicationFactor: 3, MinInsyncReplicas: 2, Heap: clusterHeap,
		StartSeconds: c.StartedIn.Seconds()}
	for _, n := range c.Nodes {
		run.RSSMiB = append(run.RSSMiB, n.RSS()>>20)
	}
	b.logf("stream: cluster %s ready in %s, RSS per node %v MiB", strings.Join(c.Brokers(), ","), c.StartedIn.Round(100*time.Millisecond), run.RSSMiB)
	return &benchCluster{c: c, k: k}, run, nil
}

func stopCluster(c *testsvc.Cluster) {
	c.StopAll()
	_ = os.RemoveAll(c.Dir)
}

func (bc *benchCluster) stop() {
	bc.k.close()
	stopCluster(bc.c)
}

// cpuSeconds is the CPU the cluster's nodes have used so far.
func (bc *benchCluster) cpuSeconds() float64 {
	var s float64
	for _, n := range bc.c.Nodes {
		if st, ok := readProcStat(n.Pid()); ok {
			s += st.self
		}
	}
	return s
}

// clusterLanes returns the comparison's exactly-once lanes, in the order they catch up:
// single, cluster, cluster, single, ... (-delivery-rounds rounds).
func (s *scenario) clusterLanes(bc *benchCluster, exports []change.ExportID) []*lane {
	var ls []*lane
	for r := range s.b.o.deliveryRounds {
		single := s.newLane(deliveryExactlyOnce, fmt.Sprintf("single%d", r), exports)
		clu := s.newLane(deliveryExactlyOnce, fmt.Sprintf("cluster%d", r), exports)
		single.name, clu.name = "single", "cluster"
		clu.onCluster(bc)
		if r%2 == 0 {
			ls = append(ls, single, clu)
		} else {
			ls = append(ls, clu, single)
		}
	}
	return ls
}

// onCluster points the lane's cdc and the bench's reads of it at the cluster.
func (l *lane) onCluster(bc *benchCluster) {
	l.vars["CDC_KAFKA_BROKERS"] = strings.Join(bc.c.Brokers(), ",")
	l.kc, l.brokers, l.brokerCPU = bc.k, bc.c.Brokers(), bc.cpuSeconds
}

// clusterCatchUps runs the comparison's lanes and fills run's figures.
func (s *scenario) clusterCatchUps(ctx context.Context, run *clusterRun, lanes []*lane, target change.LSN, changes int64) error {
	for _, l := range lanes {
		c, _, err := l.catchUp(ctx, target, changes)
		if err != nil {
			return fmt.Errorf("%s catch-up: %w", l.name, err)
		}
		s.b.logf("stream: %s: %.0f changes/s, cdc CPU %.2fs per 1,000,000 changes, broker(s) %.2fs", l.name, c.CDC.PerSecond,
			c.CPUSeconds/float64(changes)*1e6, c.BrokerCPUSeconds)
		if l.name == "cluster" {
			run.Cluster = append(run.Cluster, c)
		} else {
			run.Single = append(run.Single, c)
		}
	}
	rate := func(cs []catchUp) (ps, cpu float64) {
		var r, u []float64
		for _, c := range cs {
			r, u = append(r, c.CDC.PerSecond), append(u, c.CPUSeconds/float64(changes)*1e6)
		}
		return midMedian(r), midMedian(u)
	}
	if err := run.readReplicas(ctx, lanes); err != nil {
		return err
	}
	run.SinglePerSecond, run.SingleCPUPerM = rate(run.Single)
	run.ClusterPerSecond, run.ClusterCPUPerM = rate(run.Cluster)
	run.Ratio = over(run.ClusterPerSecond, run.SinglePerSecond)
	s.b.logf("stream: exactly-once catch-up on the cluster / on the single broker = %.2f", run.Ratio)
	return nil
}

// readReplicas sets TopicReplicas from the topics of the cluster lanes.
func (run *clusterRun) readReplicas(ctx context.Context, lanes []*lane) error {
	run.TopicReplicas = -1
	for _, l := range lanes {
		if l.kc == nil {
			continue
		}
		tds, err := l.kc.adm.ListTopics(ctx, append(l.topics, l.watermarkTopic())...)
		if err != nil {
			return fmt.Errorf("describe the cluster's topics: %w", err)
		}
		for _, td := range tds {
			for _, p := range td.Partitions {
				if run.TopicReplicas < 0 || len(p.Replicas) < run.TopicReplicas {
					run.TopicReplicas = len(p.Replicas)
				}
			}
		}
	}
	return nil
}

// printCluster prints the comparison.
func printCluster(w io.Writer, c *clusterRun, read float64) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "  three-node cluster (default replication factor %d, min.insync.replicas %d, JVM %q; started in %.1fs, RSS per node %v MiB), exactly-once, runs alternating with the single broker; cdc's topics there have %d replicas:\n",
		c.ReplicationFactor, c.MinInsyncReplicas, c.Heap, c.StartSeconds, c.RSSMiB, c.TopicReplicas)
	for _, x := range []struct {
		name string
		runs []catchUp
		ps   float64
		cpu  float64
	}{{"single broker", c.Single, c.SinglePerSecond, c.SingleCPUPerM}, {"cluster", c.Cluster, c.ClusterPerSecond, c.ClusterCPUPerM}} {
		var rates, brokers []string
		for _, r := range x.runs {
			rates = append(rates, fmt.Sprintf("%.0f", r.CDC.PerSecond))
			brokers = append(brokers, fmt.Sprintf("%.1f", r.BrokerCPUSeconds))
		}
		fmt.Fprintf(w, "    %-14s median %8.0f changes/s = %.2f of READ (runs %s); cdc CPU %.2fs per 1,000,000 changes; broker CPU per run %s s\n",
			x.name, x.ps, over(x.ps, read), strings.Join(rates, ", "), x.cpu, strings.Join(brokers, ", "))
	}
	fmt.Fprintf(w, "    cluster / single broker = %.2f\n", c.Ratio)
}

// midMedian is the median of v, the mean of the two middle values when v has an even count (two
// runs each is the default).
func midMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
