package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCluster starts a three-node cluster, reports what it costs, and checks the helpers that
// fault tests lean on: a killed partition leader is replaced by another node, a restarted node
// rejoins the in-sync replicas, and the transaction coordinator and active controller are found.
func TestCluster(t *testing.T) {
	c := StartCluster(t, ClusterOptions{})
	var rss []int64
	for _, n := range c.Nodes {
		rss = append(rss, c.RSS(n.ID)>>20)
	}
	t.Logf("cluster of %d nodes started in %s; RSS per node after start (MiB): %v", len(c.Nodes), c.StartedIn.Round(100*time.Millisecond), rss)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	adm := c.Admin(t)
	const topic = "cluster.check"
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	// A broker answers metadata from its own cache, which may not hold the new partition yet (a
	// CI run read 0 replicas right after the create): ask until the partition has a leader.
	var replicas []int32
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		tds, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if p, ok := tds[topic].Partitions[0]; ok && p.Err == nil && p.Leader >= 0 {
				replicas = p.Replicas
				break
			}
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("partition %s[0] has no leader 30s after it was created (last error %v)", topic, err)
		}
	}
	if got := len(replicas); got != 3 {
		t.Fatalf("topic created with the broker default has %d replicas, want 3", got)
	}
	cl := c.Client(t, kgo.TransactionalID("cluster-check"), kgo.DefaultProduceTopic(topic))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord("one")).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	coord, err := c.TxnCoordinator(ctx, adm, "cluster-check")
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := c.ActiveController(ctx, c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx, adm, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader of %s[0]: %d, transaction coordinator of cluster-check: %d, active controller: %d", topic, leader, coord, ctrl)

	killed := time.Now()
	c.Kill(leader)
	var moved int32 = -1
	for time.Since(killed) < time.Minute {
		if l, err := c.Leader(ctx, adm, topic, 0); err == nil && l != leader {
			moved = l
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if moved < 0 {
		t.Fatalf("no new leader of %s[0] within a minute of killing node %d", topic, leader)
	}
	t.Logf("node %d killed: node %d leads %s[0] after %s", leader, moved, topic, time.Since(killed).Round(100*time.Millisecond))
	restarted := time.Now()
	c.Restart(leader)
	t.Logf("node %d restarted in %s", leader, time.Since(restarted).Round(100*time.Millisecond))
	for {
		tds, err := adm.ListTopics(ctx, topic)
		if err == nil && len(tds[topic].Partitions[0].ISR) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node %d did not rejoin the in-sync replicas of %s[0]", leader, topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("node %d back in the in-sync replicas %s after its restart", leader, time.Since(restarted).Round(100*time.Millisecond))
}
