package fault

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testenv"
)

// TestClusterRolling runs cdc against a three-node cluster whose client traffic goes through
// one proxy per node (each node advertises its proxy's port; traffic between the nodes stays
// direct), under a steady workload, while a table of 200,000 rows is added to the publication
// and copies. It restarts the three nodes one after another as an upgrade does (SIGTERM, back and
// in sync, next), then cuts the transaction coordinator off from cdc silently for 2 minutes: its
// proxy stops forwarding without closing anything and accepts new connections it never answers,
// while the node itself stays in the cluster. After each fault it checks what TestCluster checks
// and reports how long cdc took to notice (its first warning) and until changes flowed again.
func TestClusterRolling(t *testing.T) {
	s := seed(t)
	srv := testenv.StartPrivate(t, testenv.PrivateOptions{})
	srv.KillKafka() // only PostgreSQL is needed
	const nodes = 3
	proxies := make(map[int32]*Proxy, nodes)
	advertised := make(map[int32]int, nodes)
	for id := int32(1); id <= nodes; id++ {
		p, err := NewProxy("127.0.0.1:0", "") // refuses until the node exists
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies[id], advertised[id] = p, p.Port()
	}
	c := testenv.StartCluster(t, testenv.ClusterOptions{Nodes: nodes, AdvertisedPorts: advertised})
	var seeds []string
	for _, n := range c.Nodes {
		proxies[n.ID].SetTarget(n.Addr())
		seeds = append(seeds, proxies[n.ID].Addr())
	}
	t.Logf("cluster of %d nodes ready in %s; cdc reaches node i through proxy %v", len(c.Nodes), c.StartedIn.Round(100*time.Millisecond), seeds)

	db := srv.NewDB(t)
	pub := "fault_pub"
	const bigRows, copiedRows = 30_000, 200_000
	createTables(t, db, pub, bigRows, copiedRows)
	createBank(t, db, pub)
	replica := srv.NewDB(t)
	testenv.Exec(t, replica, replicaSchema)
	r := startClusterRun(t, c, seeds, db, pub, s, bigRows, copiedRows)
	r.startApplier(replica, seeds)

	// The large table starts copying right before the first restart.
	r.addTable(addedTable)
	for _, n := range c.Nodes {
		r.settle(r.stopAndRestart(n.ID))
	}
	coord, err := c.TxnCoordinator(t.Context(), r.adm, r.txnID)
	if err != nil {
		t.Fatal(err)
	}
	r.settle(r.cutOff(proxies[coord], coord, 2*time.Minute))
	r.finish("cluster-rolling")
}

// stopAndRestart stops node with SIGTERM (a controlled shutdown: its leaderships move first),
// starts it again, waits until it is back in every in-sync replica set, and measures how long
// after the SIGTERM changes flowed again.
func (r *clusterRun) stopAndRestart(node int32) faultFigures {
	r.t.Helper()
	time.Sleep(time.Second)
	f := faultFigures{name: fmt.Sprintf("rolling restart: node %d stopped (SIGTERM) and restarted", node)}
	roles := r.roles(node)
	copying := r.rec.describe(r.added())
	from := r.sup.mark(f.name)
	at := time.Now()
	lsn := currentLSN(r.t, r.db)
	r.c.Stop(node)
	stoppedIn := time.Since(at)
	restarted := time.Now()
	r.c.Restart(node)
	startedIn := time.Since(restarted)
	waitInSync(r.t, r.adm, r.prefix)
	f.restoredIn = time.Since(restarted)
	f.flowedIn = r.flowed(at, lsn)
	f.note = fmt.Sprintf("(the node was %s; it stopped in %s and started in %s; tables added during the run, at the SIGTERM: %s; cdc logged meanwhile: %s)",
		roles, stoppedIn.Round(100*time.Millisecond), startedIn.Round(100*time.Millisecond), copying, warnings(r.sup.since(from)))
	r.logf("%s: changes flowed again %s after the SIGTERM", f.name, f.flowedIn.Round(100*time.Millisecond))
	return f
}

// cutOff turns node's proxy into a blackhole for d (cdc's connections to the node stall, new ones
// are accepted and never answered; the node stays in the cluster), then heals it. It measures
// when cdc first warned, when /readyz first said why it waits, and how long after the cut and
// after the heal changes flowed again.
func (r *clusterRun) cutOff(p *Proxy, node int32, d time.Duration) faultFigures {
	r.t.Helper()
	time.Sleep(time.Second)
	f := faultFigures{name: fmt.Sprintf("node %d cut off from cdc silently for %s", node, d)}
	roles := r.roles(node)
	from := r.sup.mark(f.name)
	at := time.Now()
	stalled := p.Blackhole()
	lsn := currentLSN(r.t, r.db)
	var ready []string
	var notReadyAt time.Time
	for time.Since(at) < d {
		a := readyz(r.httpAddr)
		ready = append(ready, a)
		if notReadyAt.IsZero() && strings.Contains(a, "Kafka has not taken a batch") {
			notReadyAt = time.Now()
		}
		time.Sleep(5 * time.Second)
		r.sup.check()
		if r.applier != nil {
			r.applier.check()
		}
	}
	duringCut := r.sup.since(from)
	healed := time.Now()
	p.Heal()
	f.flowedIn = r.flowed(at, lsn)
	logged := r.sup.since(from)
	afterHeal := f.flowedIn - healed.Sub(at)
	noticed := "never"
	if w, line, ok := firstWarning(duringCut); ok {
		noticed = fmt.Sprintf("%s after the cut: %s", w.Sub(at).Round(100*time.Millisecond), line)
	}
	said := "never"
	if !notReadyAt.IsZero() {
		said = notReadyAt.Sub(at).Round(time.Second).String() + " after the cut (polled every 5s)"
	}
	f.note = fmt.Sprintf("(the node was %s; %d of cdc's connections stalled, %d new ones swallowed; changes flowed %s after the heal; cdc's first warning during the cut: %s; /readyz said why %s; /readyz meanwhile: %s; cdc logged from the cut until changes flowed: %s)",
		roles, stalled, p.Holes(), afterHeal.Round(100*time.Millisecond), noticed, said, summarise(ready), warnings(logged))
	r.logf("%s: changes flowed again %s after the cut, %s after the heal; first warning %s",
		f.name, f.flowedIn.Round(100*time.Millisecond), afterHeal.Round(100*time.Millisecond), noticed)
	return f
}

// firstWarning returns the time and text of the first warning or error line of cdc's log (text
// format, with its time= attribute), but for the start-up warning of the tests' unencrypted
// PostgreSQL connection.
func firstWarning(log string) (time.Time, string, bool) {
	return firstLine(log, func(line string) bool {
		return (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) &&
			!strings.Contains(line, "sslmode=disable")
	})
}

// firstLine returns the time and text of the first line of cdc's log (text format) that match
// accepts.
func firstLine(log string, match func(string) bool) (time.Time, string, bool) {
	for _, line := range strings.Split(log, "\n") {
		if !match(line) {
			continue
		}
		rest, ok := strings.CutPrefix(line, "time=")
		if !ok {
			continue
		}
		ts, _, _ := strings.Cut(rest, " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		if len(line) > 400 {
			line = line[:400] + "…"
		}
		return at, line, true
	}
	return time.Time{}, "", false
}
