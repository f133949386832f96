package fault

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
)

// clusterTables are the published tables of the cluster suite (fault_test.go's a, b and c;
// d is written by the workload but not published).
var clusterTables = initialTables

// TestCluster runs cdc against a three-node Kafka cluster (testenv.StartCluster, brokers with
// default.replication.factor=3 and min.insync.replicas=2) under a steady workload, and takes the
// cluster's nodes down as a cluster fails: the leader of a busy data partition, the coordinator
// of cdc's transactions, the active controller (each killed with SIGKILL and restarted), then two
// of three nodes for 30 s. tidemark-apply keeps a replica in a second database meanwhile, and a
// bank table (transfers between accounts) shows whether it was ever torn. After each fault it
// stops the workload and checks that every topic materialised by key equals its table, that
// nothing was published twice (read-committed), that no watermark moved backwards, that the
// replica equals the source and no sample of it broke the bank's sum, and reports how long
// changes took to flow again. First, `cdc check` is run against topics of one replica.
func TestCluster(t *testing.T) {
	s := seed(t)
	srv := testenv.StartPrivate(t, testenv.PrivateOptions{})
	// Only PostgreSQL is needed: the private single broker would take memory and CPU from the
	// cluster.
	srv.KillKafka()
	c := testenv.StartCluster(t, testenv.ClusterOptions{})
	var rss []string
	for _, n := range c.Nodes {
		rss = append(rss, fmt.Sprintf("node %d: %d MiB", n.ID, c.RSS(n.ID)>>20))
	}
	t.Logf("cluster of %d nodes ready in %s; RSS %s", len(c.Nodes), c.StartedIn.Round(100*time.Millisecond), strings.Join(rss, ", "))

	db := srv.NewDB(t)
	pub := "fault_pub"
	const bigRows = 30_000
	createTables(t, db, pub, bigRows, 1000)

	t.Run("check", func(t *testing.T) { clusterCheck(t, c, db, pub) })
	// tidemark-apply keeps a replica of the published tables and the bank table's.
	createBank(t, db, pub)
	replica := srv.NewDB(t)
	testenv.Exec(t, replica, replicaSchema)
	t.Run("faults", func(t *testing.T) { clusterFaults(t, c, db, replica, pub, s, bigRows) })
}

// clusterCheck runs `cdc check` with topics of one replica on the cluster: their ✗ line and
// fix, and the ! line of CDC_TOPIC_REPLICATION_FACTOR=1.
func clusterCheck(t *testing.T, c *testenv.Cluster, db, pub string) {
	adm := c.Admin(t)
	prefix := "chk" + testsvc.RandomHex(4)
	one := prefix + ".public.a"
	if _, err := adm.CreateTopic(t.Context(), 1, 1, map[string]*string{"cleanup.policy": new("compact")}, one); err != nil {
		t.Fatalf("create %s: %v", one, err)
	}
	vars := map[string]string{
		"CDC_PG_URL":        db,
		"CDC_KAFKA_BROKERS": strings.Join(c.Brokers(), ","),
		"CDC_PUBLICATION":   pub,
		"CDC_SLOT":          "chk_slot",
		"CDC_TOPIC_PREFIX":  prefix,
	}
	out, code := runCheck(t, vars)
	t.Logf("cdc check (exit %d) with %s on one replica:\n%s", code, one, out)
	if code == 0 {
		t.Errorf("cdc check exits 0 with a topic of one replica on a cluster of 3 brokers")
	}
	assertLines(t, out,
		"✗ Kafka: 1 of cdc's 1 topics hold their data on one replica on a cluster of 3 brokers: "+one,
		"fix: raise their replication factor to 3 with kafka-reassign-partitions",
		"✓ Kafka: topics cdc creates get 3 replicas (the brokers' default.replication.factor=3)")
	if strings.Contains(out, "✗ Kafka: the transaction state log") {
		t.Errorf("the transaction state log of 3 replicas is refused")
	}

	vars["CDC_TOPIC_PREFIX"] = "chk" + testsvc.RandomHex(4)
	vars["CDC_TOPIC_REPLICATION_FACTOR"] = "1"
	out, code = runCheck(t, vars)
	t.Logf("cdc check (exit %d) with CDC_TOPIC_REPLICATION_FACTOR=1:\n%s", code, out)
	if code != 0 {
		t.Errorf("cdc check exits %d with a warning only", code)
	}
	assertLines(t, out,
		"! Kafka: topics cdc creates would hold their data on one replica (CDC_TOPIC_REPLICATION_FACTOR=1) on a cluster of 3 brokers",
		"fix: set CDC_TOPIC_REPLICATION_FACTOR=3, or unset it to use the brokers' default")
}

func runCheck(t testing.TB, vars map[string]string) (string, int) {
	t.Helper()
	cmd := exec.Command(cdcBinary, "check")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("cdc check: %v", err)
	}
	return string(out), code
}

func assertLines(t testing.TB, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("cdc check output lacks %q", w)
		}
	}
}

func clusterFaults(t *testing.T, c *testenv.Cluster, db, replica, pub string, seed uint64, bigRows int) {
	r := startClusterRun(t, c, c.Brokers(), db, pub, seed, bigRows, 1000)
	r.startApplier(replica, c.Brokers())

	// (a) The leader of the busiest data partition: public.a's partition 0.
	leader, err := c.Leader(t.Context(), r.adm, r.busy, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.settle(r.killAndRestart(fmt.Sprintf("leader of %s[0] (node %d) killed", r.busy, leader), leader))

	// (b) The coordinator of cdc's transactions.
	coord, err := c.TxnCoordinator(t.Context(), r.adm, r.txnID)
	if err != nil {
		t.Fatal(err)
	}
	r.settle(r.killAndRestart(fmt.Sprintf("transaction coordinator of %s (node %d) killed", r.txnID, coord), coord))

	// (c) The active controller.
	ctrl, err := c.ActiveController(t.Context(), c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	r.settle(r.killAndRestart(fmt.Sprintf("active controller (node %d) killed", ctrl), ctrl))

	// (d) Two of three nodes down for 30 s: min.insync.replicas=2 cannot be met, and the
	// controller quorum has no majority.
	down := []int32{c.Nodes[0].ID, c.Nodes[1].ID}
	if ctrl == c.Nodes[2].ID {
		down = []int32{c.Nodes[1].ID, c.Nodes[2].ID}
	}
	time.Sleep(time.Second)
	var downRoles []string
	for _, n := range down {
		downRoles = append(downRoles, fmt.Sprintf("node %d: %s", n, r.roles(n)))
	}
	from := r.sup.mark("two nodes down")
	at := time.Now()
	for _, n := range down {
		c.Kill(n)
	}
	lsn := currentLSN(t, db)
	var ready []string
	for time.Since(at) < 30*time.Second {
		ready = append(ready, readyz(r.httpAddr))
		time.Sleep(3 * time.Second)
		r.sup.check()
		r.applier.check()
	}
	logged := r.sup.since(from)
	// /readyz says why cdc waits (on c9cb695 it answered 200 {"ready":true} all along).
	saidWhy := false
	for _, a := range ready {
		saidWhy = saidWhy || strings.Contains(a, "Kafka has not taken a batch")
	}
	if !saidWhy {
		t.Errorf("/readyz never said that cdc waits for Kafka while two of three nodes were down: %s", summarise(ready))
	}
	restarted := time.Now()
	for _, n := range down {
		c.Restart(n)
	}
	startedIn := time.Since(restarted)
	f := faultFigures{name: fmt.Sprintf("nodes %v down for 30s", down)}
	f.flowedIn = r.flowed(at, lsn)
	afterReturn := f.flowedIn - restarted.Sub(at)
	waitInSync(t, r.adm, r.prefix)
	f.restoredIn = time.Since(restarted)
	f.note = fmt.Sprintf("(%s; both restarted in %s, one after the other; changes flowed %s after the first restart began); /readyz meanwhile: %s; cdc logged meanwhile: %s",
		strings.Join(downRoles, "; "), startedIn.Round(100*time.Millisecond), afterReturn.Round(100*time.Millisecond), summarise(ready), warnings(logged))
	r.settle(f)
	r.finish("cluster")
}

func mustExport(t testing.TB, tbl string) change.ExportID {
	t.Helper()
	e, err := change.ParseExportID(tbl)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// waitInSync waits until every partition of the topics of prefix and of __transaction_state has
// all its replicas in sync.
func waitInSync(t testing.TB, adm *kadm.Client, prefix string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tds, err := adm.ListTopicsWithInternal(ctx)
		cancel()
		behind := 0
		if err == nil {
			for _, name := range tds.Names() {
				if !strings.HasPrefix(name, prefix+".") && name != "__transaction_state" {
					continue
				}
				for _, p := range tds[name].Partitions {
					if len(p.ISR) < len(p.Replicas) {
						behind++
					}
				}
			}
		}
		if err == nil && behind == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions still under-replicated 2 minutes after the restart (%d; %v)", behind, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readyz returns /readyz's status and the start of its body.
func readyz(addr string) string {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + addr + "/readyz")
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

// durations matches the durations in an answer ("for 1m5s").
var durations = regexp.MustCompile(`\b(\d+h)?(\d+m)?\d+(\.\d+)?s\b`)

// summarise folds consecutive answers that are equal but for their durations: "answer ×n",
// the answer as it was first given.
func summarise(answers []string) string {
	var out []string
	for i := 0; i < len(answers); {
		j := i
		for j < len(answers) && durations.ReplaceAllString(answers[j], "N") == durations.ReplaceAllString(answers[i], "N") {
			j++
		}
		out = append(out, fmt.Sprintf("%q ×%d", answers[i], j-i))
		i = j
	}
	return strings.Join(slices.Clip(out), "; ")
}

// roles says what node is to cdc right now: leader of busy's partition 0, coordinator of
// txnID, active controller.
func roles(t testing.TB, c *testenv.Cluster, adm *kadm.Client, busy, txnID string, node int32) string {
	t.Helper()
	var out []string
	if l, err := c.Leader(t.Context(), adm, busy, 0); err == nil && l == node {
		out = append(out, "leader of "+busy+"[0]")
	}
	if co, err := c.TxnCoordinator(t.Context(), adm, txnID); err == nil && co == node {
		out = append(out, "transaction coordinator")
	}
	if ctrl, err := c.ActiveController(t.Context(), c.Client(t)); err == nil && ctrl == node {
		out = append(out, "active controller")
	}
	if len(out) == 0 {
		return "a follower only"
	}
	return strings.Join(out, ", ")
}

// warnings returns the distinct messages of cdc's warning and error lines in log, with counts.
func warnings(log string) string {
	counts := map[string]int{}
	var order []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		msg := line
		if i := strings.Index(line, "msg="); i >= 0 {
			msg = line[i:]
			if len(msg) > 300 {
				msg = msg[:300]
			}
		}
		if counts[msg] == 0 {
			order = append(order, msg)
		}
		counts[msg]++
	}
	if len(order) == 0 {
		return "no warnings or errors"
	}
	var out []string
	for _, m := range order[:min(len(order), 6)] {
		out = append(out, fmt.Sprintf("%s (×%d)", m, counts[m]))
	}
	return strings.Join(out, " | ")
}
