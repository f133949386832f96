package fault

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pipeline"
)

// faultFigures is what one fault cost.
type faultFigures struct {
	name       string
	flowedIn   time.Duration // from the fault until the watermarks passed the WAL position at the fault
	restoredIn time.Duration // from the restart until the node was back in every in-sync replica set (0: no restart)
	duplicates int           // changes published twice since the start of the run (cumulative)
	lost       int           // keys missing, extra or different, over every table
	regressed  int           // watermark records that moved backwards (cumulative)
	// With an applier (startApplier): the tables where the replica still differed from the
	// source 2 minutes after the workload stopped, and the replica samples that broke the bank
	// invariant (cumulative) of how many.
	replicaDiffer []string
	torn, samples int
	withReplica   bool
	note          string
}

// clusterRun is one cdc run against a Cluster under a steady workload: the tests of the cluster
// suite take the cluster's nodes down through it and settle after each fault.
type clusterRun struct {
	t        *testing.T
	c        *testenv.Cluster
	adm      *kadm.Client
	db, pub  string
	seed     uint64
	prefix   string
	busy     string // the topic of clusterTables[0]
	txnID    string
	httpAddr string
	// direct are the brokers of the test's own clients (never through a proxy).
	direct []string
	// tables are the published tables; flowIDs the exports whose watermarks measure "changes
	// flowed again" (tables added during the run, still copying, are not among them).
	tables  []string
	ids     []change.ExportID
	flowIDs []change.ExportID

	rec          *wmRecorder
	sup          *supervisor
	stopSampling func() []slotSample
	wl           *workload
	wlRound      uint64
	bigRows      int
	addedRows    int
	start        time.Time
	figures      []faultFigures

	// The replica side (startApplier); applier is nil without it.
	replica   string
	applier   *supervisor
	transfers *transfers
	watch     *replicaWatch
}

// startClusterRun starts cdc on pub's tables (clusterTables) against c (CDC_KAFKA_BROKERS:
// brokers, the nodes' client listeners or proxies in front of them) in exactly-once mode with 3 partitions per topic, waits until every
// table is hydrated, checks that the topics got the brokers' default replication factor, and starts
// the workload.
func startClusterRun(t *testing.T, c *testenv.Cluster, brokers []string, db, pub string, seed uint64, bigRows, addedRows int) *clusterRun {
	id := strconv.FormatUint(seed%1_000_000_000, 36)
	r := &clusterRun{t: t, c: c, adm: c.Admin(t), db: db, pub: pub, seed: seed, prefix: "clu" + id,
		direct: c.DirectBrokers(), bigRows: bigRows, addedRows: addedRows, start: time.Now()}
	slot := "clu_" + id
	httpPort, err := testsvc.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	r.httpAddr = "127.0.0.1:" + strconv.Itoa(httpPort[0])
	vars := map[string]string{
		"CDC_PG_URL":                    db,
		"CDC_KAFKA_BROKERS":             strings.Join(brokers, ","),
		"CDC_PUBLICATION":               pub,
		"CDC_SLOT":                      slot,
		"CDC_TOPIC_PREFIX":              r.prefix,
		"CDC_TOPIC_PARTITIONS":          "3",
		"CDC_DELIVERY":                  "exactly-once",
		"CDC_WATERMARK_INTERVAL":        "200ms",
		"CDC_PUBLICATION_POLL_INTERVAL": "500ms",
		"CDC_SNAPSHOT_WORKERS":          "2",
		"CDC_HTTP_ADDR":                 r.httpAddr,
		"CDC_LOG_FORMAT":                "text",
		"CDC_LOG_LEVEL":                 "info",
	}
	r.busy = change.TopicName(r.prefix, mustExport(t, clusterTables[0]))
	for _, tbl := range clusterTables {
		r.tables = append(r.tables, tbl)
		r.ids = append(r.ids, mustExport(t, tbl))
	}
	r.flowIDs = append([]change.ExportID(nil), r.ids...)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	r.txnID = pipeline.TransactionalID(strings.TrimPrefix(u.Path, "/"), slot)

	r.rec = startRecorder(t, r.direct, r.prefix+".__watermarks")
	r.stopSampling = sampleSlot(t, db, slot)
	r.sup = newSupervisor(t, vars)
	r.sup.start()
	if !waitWatermarks(t, r.rec, r.sup, 2*time.Minute, 1, r.ids) {
		t.FailNow()
	}
	r.logf("tables hydrated")

	// Created without CDC_TOPIC_REPLICATION_FACTOR: the brokers' default (3 on three nodes), the
	// watermark topic too.
	wantReplicas := min(3, len(c.Nodes))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	tds, err := r.adm.ListTopics(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range tds.Names() {
		if !strings.HasPrefix(name, r.prefix+".") {
			continue
		}
		for _, p := range tds[name].Partitions.Sorted() {
			if len(p.Replicas) != wantReplicas {
				t.Errorf("topic %s partition %d has %d replicas, want the brokers' default of %d", name, p.Partition, len(p.Replicas), wantReplicas)
			}
		}
	}
	r.wl = startWorkload(t, db, seed, 3, bigRows, addedRows)
	return r
}

// logf logs with the time since the run started.
func (r *clusterRun) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("%s: %s", time.Since(r.start).Round(10*time.Millisecond), fmt.Sprintf(format, args...))
}

// addTable adds tbl to the publication: it copies while the next faults happen. Its watermark
// counts at the next settle, not in "changes flowed again".
func (r *clusterRun) addTable(tbl string) {
	r.t.Helper()
	testenv.Exec(r.t, r.db, `ALTER PUBLICATION `+r.pub+` ADD TABLE `+strings.TrimPrefix(tbl, "public."))
	r.tables = append(r.tables, tbl)
	r.ids = append(r.ids, mustExport(r.t, tbl))
	r.logf("%s added to the publication", tbl)
}

// added returns the exports of the tables added during the run (addTable).
func (r *clusterRun) added() []change.ExportID {
	return r.ids[len(r.flowIDs):]
}

// settle lets the workload run, then stops it, waits for the watermarks of every table to pass
// the last write, checks every topic against its table, records f and starts the workload again.
func (r *clusterRun) settle(f faultFigures) {
	r.t.Helper()
	time.Sleep(2 * time.Second)
	r.wl.stop()
	if r.applier != nil {
		r.transfers.stop()
	}
	end := currentLSN(r.t, r.db)
	if !waitWatermarks(r.t, r.rec, r.sup, 3*time.Minute, end, r.ids) {
		r.t.FailNow()
	}
	conn := testenv.Conn(r.t, r.db)
	for _, tbl := range r.tables {
		topic := change.TopicName(r.prefix, mustExport(r.t, tbl))
		rep := analyse(r.t, tbl, readTopic(r.t, r.direct, topic), true)
		missing, extra, diff, _ := compareWithTable(r.t, conn, tbl, rep)
		f.duplicates += rep.duplicates
		f.lost += missing + extra + diff
	}
	f.regressed, _ = r.rec.checkMonotonic(r.t)
	if r.applier != nil {
		r.applier.check()
		f.withReplica = true
		f.replicaDiffer = replicaDiffers(r.t, r.db, r.replica, append(slices.Clone(r.tables), "public.accounts"), 2*time.Minute)
		for _, d := range f.replicaDiffer {
			r.t.Errorf("after %s: the replica differs from the source 2 minutes after the workload stopped: %s", f.name, d)
		}
		var examples []string
		f.samples, f.torn, examples = r.watch.counts()
		for _, e := range examples {
			r.t.Errorf("replica sample broke the bank invariant: %s", e)
		}
		if f.samples == 0 {
			r.t.Errorf("after %s: no sample of the replica's accounts yet", f.name)
		}
	}
	r.figures = append(r.figures, f)
	r.logf("after %s: %s", f.name, f.line())
	r.wlRound++
	r.wl = startWorkload(r.t, r.db, r.seed+r.wlRound, 3, r.bigRows, r.addedRows)
	if r.applier != nil {
		r.transfers = startTransfers(r.t, r.db, r.seed+r.wlRound)
	}
}

// line is f as one line of the table of figures.
func (f faultFigures) line() string {
	replica := "no replica"
	if f.withReplica {
		replica = fmt.Sprintf("replica: %d tables differing, %d of %d samples torn", len(f.replicaDiffer), f.torn, f.samples)
	}
	restored := "no restart"
	if f.restoredIn > 0 {
		restored = "node(s) back in sync " + f.restoredIn.Round(100*time.Millisecond).String() + " after restart"
	}
	return fmt.Sprintf("flowed again in %s, %s, duplicates %d, lost/extra/different keys %d, watermark regressions %d, %s %s",
		f.flowedIn.Round(100*time.Millisecond), restored, f.duplicates, f.lost, f.regressed, replica, f.note)
}

// flowed waits until the watermarks of the streaming tables pass lsn and returns how long after
// at the recorder first saw them there.
func (r *clusterRun) flowed(at time.Time, lsn change.LSN) time.Duration {
	r.t.Helper()
	if !waitWatermarks(r.t, r.rec, r.sup, 4*time.Minute, lsn, r.flowIDs) {
		r.t.FailNow()
	}
	if seen, ok := r.rec.reachedAt(lsn, r.flowIDs); ok {
		return seen.Sub(at)
	}
	return time.Since(at)
}

// killAndRestart kills node, measures until changes flow, restarts it and waits until it is
// back in every in-sync replica set.
func (r *clusterRun) killAndRestart(name string, node int32) faultFigures {
	r.t.Helper()
	time.Sleep(time.Second)
	f := faultFigures{name: name, note: "(the node was " + r.roles(node) + ")"}
	at := time.Now()
	r.c.Kill(node)
	lsn := currentLSN(r.t, r.db)
	f.flowedIn = r.flowed(at, lsn)
	r.logf("%s: node %d killed; changes flowed again after %s", name, node, f.flowedIn.Round(100*time.Millisecond))
	restarted := time.Now()
	r.c.Restart(node)
	waitInSync(r.t, r.adm, r.prefix)
	f.restoredIn = time.Since(restarted)
	return f
}

// roles says what node is to cdc right now.
func (r *clusterRun) roles(node int32) string {
	return roles(r.t, r.c, r.adm, r.busy, r.txnID, node)
}

// finish stops the workload and cdc (SIGTERM, exit code 0), checks that the slot was never
// confirmed past Kafka, and logs the table of figures and a summary line.
func (r *clusterRun) finish(suite string) {
	r.t.Helper()
	r.wl.stop()
	if r.applier != nil {
		r.transfers.stop()
		if code := r.applier.stop(); code != 0 {
			r.t.Errorf("tidemark-apply exit code after SIGTERM = %d, want 0", code)
		}
		r.watch.stop()
	}
	if code := r.sup.stop(); code != 0 {
		r.t.Errorf("cdc exit code after SIGTERM = %d, want 0", code)
	}
	samples := r.stopSampling()
	// Everything cdc committed on its way out, which its last confirmation may cover.
	r.rec.drain()
	slotChecked, slotAhead := r.rec.checkSlotNeverAhead(r.t, samples)
	for _, f := range r.figures {
		line := fmt.Sprintf("%s fault [%s]: %s", suite, f.name, f.line())
		r.t.Log(line)
		fmt.Fprintln(os.Stderr, line)
	}
	summary := fmt.Sprintf("%s summary: seed=%d cdc_restarts=%d unplanned_exits=%d slot_ahead=%d/%d pipeline_restarts=%d workload rounds=%d wall=%s",
		suite, r.seed, r.sup.restarts, r.sup.unplanned, slotAhead, slotChecked, r.sup.count("pipeline failed; restarting"), r.wlRound, time.Since(r.start).Round(time.Second))
	if r.applier != nil {
		summary += fmt.Sprintf(" apply_restarts=%d apply_unplanned_exits=%d apply_warnings: %s", r.applier.restarts, r.applier.unplanned, warnings(r.applier.log.String()))
	}
	r.t.Log(summary)
	fmt.Fprintln(os.Stderr, summary)
}
