package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
)

// scenario is one run of the workload under faults.
type scenario struct {
	name          string
	delivery      string
	interval      string // CDC_WATERMARK_INTERVAL
	bigRows       int    // rows of public.a before cdc starts
	addedRows     int    // rows of public.d before it is added to the publication
	snapshotKills int    // SIGKILLs during the initial snapshot
	streamKills   int    // SIGKILLs while streaming, before the table is added
	addKills      int    // SIGKILLs after the table is added (mostly during its copy)
	lateKills     int    // SIGKILLs while streaming, after the table is added
	cuts          int    // connection cuts per proxy (PostgreSQL, Kafka)
	brokerCrash   bool
	pgCrash       bool
	// outage: the broker is down this long, longer than the walsender's timeout and the Kafka
	// transaction timeout (both set to outageTimeout for the scenario).
	outage time.Duration
}

// outageTimeout is wal_sender_timeout and CDC_KAFKA_TRANSACTION_TIMEOUT in a scenario with an
// outage.
const outageTimeout = 4 * time.Second

// The sink commits a Kafka transaction about every 100ms (its linger) while watermark records of
// a moving export are coalesced to one per interval/4. With a 200ms interval nearly every
// transaction carries one; with the default 1s most do not, so a kill finds data committed past
// the last record: the second scenario is the one where a resume from the watermark records alone
// publishes changes twice.
var scenarios = []scenario{
	{name: "exactly-once", delivery: "exactly-once", interval: "200ms", bigRows: 200_000, addedRows: 200_000,
		snapshotKills: 3, streamKills: 4, addKills: 3, lateKills: 2, cuts: 4, brokerCrash: true, pgCrash: true},
	{name: "exactly-once-default-interval", delivery: "exactly-once", interval: "1s", bigRows: 100_000, addedRows: 50_000,
		snapshotKills: 1, streamKills: 6, addKills: 1, lateKills: 3, cuts: 2, pgCrash: true, outage: 10 * time.Second},
	{name: "at-least-once", delivery: "at-least-once", interval: "200ms", bigRows: 100_000, addedRows: 50_000,
		snapshotKills: 2, streamKills: 2, addKills: 1, lateKills: 1, cuts: 2, brokerCrash: true, pgCrash: true},
}

// seed returns CDC_FAULT_SEED, or a time-based seed; it is printed either way.
func seed(t testing.TB) uint64 {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("CDC_FAULT_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CDC_FAULT_SEED=%q: %v", v, err)
		}
		s = n
	}
	t.Logf("seed %d (set CDC_FAULT_SEED=%d to repeat the workload and the fault schedule)", s, s)
	fmt.Fprintf(os.Stderr, "fault: seed %d\n", s)
	return s
}

func newProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy("127.0.0.1:0", target)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestFaults runs each scenario against private servers whose every client connection (cdc's and
// the test's own Kafka clients) goes through proxies the test cuts.
func TestFaults(t *testing.T) {
	s := seed(t)
	// The broker advertises the proxy, so cdc's connections to it all go through the proxy.
	kafkaProxy := newProxy(t, "")
	srv := testenv.StartPrivate(t, testenv.PrivateOptions{KafkaAdvertisedPort: kafkaProxy.Port()})
	kafkaProxy.SetTarget(srv.KafkaAddr())
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			runScenario(t, srv, kafkaProxy, s+uint64(i), sc)
		})
	}
}

// tally counts what a scenario did and found.
type tally struct {
	killsByPhase   map[string]int
	pgCuts         int
	kafkaCuts      int
	brokerRestarts int
	outages        int
	pgRestarts     int
}

func runScenario(t *testing.T, srv *testenv.Servers, kafkaProxy *Proxy, seed uint64, sc scenario) {
	start := time.Now()
	rng := rand.New(rand.NewPCG(seed, 0))
	db := srv.NewDB(t)
	pub := "fault_pub"
	createTables(t, db, pub, sc.bigRows, sc.addedRows)
	t.Logf("tables created and loaded in %s", time.Since(start).Round(100*time.Millisecond))

	pgProxy := newProxy(t, srv.PGAddr())
	cdcURL, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	cdcURL.Host = pgProxy.Addr()
	id := strconv.FormatUint(rng.Uint64()%1_000_000_000, 36)
	prefix := "fault" + id
	slot := "fault_" + id
	brokers := []string{kafkaProxy.Addr()}
	vars := map[string]string{
		"CDC_PG_URL":                    cdcURL.String(),
		"CDC_KAFKA_BROKERS":             kafkaProxy.Addr(),
		"CDC_PUBLICATION":               pub,
		"CDC_SLOT":                      slot,
		"CDC_TOPIC_PREFIX":              prefix,
		"CDC_DELIVERY":                  sc.delivery,
		"CDC_WATERMARK_INTERVAL":        sc.interval,
		"CDC_PUBLICATION_POLL_INTERVAL": "500ms",
		"CDC_SNAPSHOT_WORKERS":          "2",
		"CDC_LOG_FORMAT":                "text",
		"CDC_LOG_LEVEL":                 "info",
	}
	if sc.outage > 0 {
		vars["CDC_KAFKA_TRANSACTION_TIMEOUT"] = outageTimeout.String()
		testenv.Exec(t, db, fmt.Sprintf("ALTER SYSTEM SET wal_sender_timeout = '%dms'", outageTimeout.Milliseconds()), "SELECT pg_reload_conf()")
		t.Cleanup(func() { testenv.Exec(t, db, "ALTER SYSTEM RESET wal_sender_timeout", "SELECT pg_reload_conf()") })
	}
	ids := make(map[string]change.ExportID)
	for _, tbl := range allTables {
		e, err := change.ParseExportID(tbl)
		if err != nil {
			t.Fatal(err)
		}
		ids[tbl] = e
	}
	exportsOf := func(tables []string) []change.ExportID {
		out := make([]change.ExportID, len(tables))
		for i, tbl := range tables {
			out[i] = ids[tbl]
		}
		return out
	}

	rec := startRecorder(t, brokers, prefix+".__watermarks")
	stopSampling := sampleSlot(t, db, slot)
	wl := startWorkload(t, db, seed, 4, sc.bigRows, sc.addedRows)
	sup := newSupervisor(t, vars)
	sup.start()

	tl := tally{killsByPhase: map[string]int{}}
	added := false
	pause := func(minMS, maxMS int) {
		time.Sleep(time.Duration(minMS+rng.IntN(maxMS-minMS+1)) * time.Millisecond)
		sup.check()
	}
	// phase names where cdc is when killed, from what the watermark topic shows.
	phase := func() string {
		for _, e := range exportsOf(initialTables) {
			if _, ok := rec.watermarkOf(e); !ok {
				return "initial snapshot"
			}
		}
		if added {
			if _, ok := rec.watermarkOf(ids[addedTable]); !ok {
				return "added table's copy"
			}
		}
		return "streaming"
	}
	do := func(action string) {
		switch action {
		case "kill":
			p := phase()
			sup.kill()
			tl.killsByPhase[p]++
			t.Logf("%s: SIGKILL cdc during the %s", time.Since(start).Round(10*time.Millisecond), p)
		case "pgcut":
			n := pgProxy.Cut()
			tl.pgCuts++
			t.Logf("%s: cut %d PostgreSQL connections", time.Since(start).Round(10*time.Millisecond), n)
		case "kafkacut":
			n := kafkaProxy.Cut()
			tl.kafkaCuts++
			t.Logf("%s: cut %d Kafka connections", time.Since(start).Round(10*time.Millisecond), n)
		case "broker":
			srv.KillKafka()
			t.Logf("%s: broker killed (SIGKILL)", time.Since(start).Round(10*time.Millisecond))
			pause(500, 2000)
			srv.StartKafka()
			tl.brokerRestarts++
			t.Logf("%s: broker restarted on its data folder", time.Since(start).Round(10*time.Millisecond))
		case "outage":
			srv.KillKafka()
			from := sup.mark("broker killed for a long outage")
			t.Logf("%s: broker killed for %s (walsender and transaction timeouts %s)", time.Since(start).Round(10*time.Millisecond), sc.outage, outageTimeout)
			time.Sleep(sc.outage)
			sup.check()
			// Status updates keep the walsender alive while the sink waits for Kafka.
			if during := sup.since(from); strings.Contains(during, "replication connection lost") {
				t.Errorf("the replication connection was lost during the Kafka outage (status updates stopped?):\n%s", during)
			}
			srv.StartKafka()
			tl.brokerRestarts++
			tl.outages++
			t.Logf("%s: broker back after the outage", time.Since(start).Round(10*time.Millisecond))
		case "pgcrash":
			srv.RestartPostgres()
			tl.pgRestarts++
			t.Logf("%s: PostgreSQL restarted (-m immediate)", time.Since(start).Round(10*time.Millisecond))
		}
	}
	actions := func(kills, cuts int, extra ...string) []string {
		var out []string
		for range kills {
			out = append(out, "kill")
		}
		for range cuts {
			out = append(out, "pgcut", "kafkacut")
		}
		out = append(out, extra...)
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}

	// killDuringCopy waits until a new snapshot attempt of e has started (its record is in the
	// watermark topic), lets the copy run a random part of its expected length, and kills cdc.
	killDuringCopy := func(e change.ExportID, rows int) {
		prev := rec.attempt(e)
		deadline := time.Now().Add(time.Minute)
		for rec.attempt(e) <= prev && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			sup.check()
		}
		if rec.attempt(e) <= prev {
			t.Logf("no new snapshot attempt of %s within a minute (still %d); killing anyway", e, prev)
		}
		// The copy runs at roughly 100k rows a second here.
		window := max(300, 1500*rows/200_000)
		time.Sleep(time.Duration(50+rng.IntN(window-50)) * time.Millisecond)
		do("kill")
	}

	// 1. Kills during the initial snapshot of a (sc.bigRows rows), b and c.
	for range sc.snapshotKills {
		killDuringCopy(ids["public.a"], sc.bigRows)
	}
	if !waitWatermarks(t, rec, sup, 3*time.Minute, 1, exportsOf(initialTables)) {
		t.FailNow()
	}
	t.Logf("%s: initial tables hydrated", time.Since(start).Round(10*time.Millisecond))

	// 2. Streaming: kills, cuts, a broker crash and a PostgreSQL crash, in random order.
	var crashes []string
	if sc.brokerCrash {
		crashes = append(crashes, "broker")
	}
	if sc.pgCrash {
		crashes = append(crashes, "pgcrash")
	}
	if sc.outage > 0 {
		crashes = append(crashes, "outage")
	}
	streamCuts := max(sc.cuts-2, 1)
	for _, a := range actions(sc.streamKills, streamCuts, crashes...) {
		pause(700, 2500)
		do(a)
	}

	// 3. A table added to the publication while running: kills and cuts during its copy.
	testenv.Exec(t, db, `ALTER PUBLICATION `+pub+` ADD TABLE d`)
	added = true
	t.Logf("%s: public.d added to the publication", time.Since(start).Round(10*time.Millisecond))
	for range sc.addKills {
		killDuringCopy(ids[addedTable], sc.addedRows)
	}
	for _, a := range actions(0, 1) {
		pause(200, 1000)
		do(a)
	}
	if !waitWatermarks(t, rec, sup, 3*time.Minute, 1, exportsOf([]string{addedTable})) {
		t.FailNow()
	}
	t.Logf("%s: public.d hydrated", time.Since(start).Round(10*time.Millisecond))

	// 4. More streaming faults with all four tables.
	for _, a := range actions(sc.lateKills, sc.cuts-streamCuts-1) {
		pause(700, 2500)
		do(a)
	}
	pause(1000, 2000)

	// The end: stop writing, wait until every watermark passes the last write, stop cdc.
	wl.stop()
	t.Logf("workload: %s", wl.summary())
	end := currentLSN(t, db)
	caughtUp := waitWatermarks(t, rec, sup, 2*time.Minute, end, exportsOf(allTables))
	if code := sup.stop(); code != 0 {
		t.Errorf("cdc exit code after SIGTERM = %d, want 0", code)
	}
	time.Sleep(500 * time.Millisecond) // the final watermark records of the shutdown
	samples := stopSampling()
	// Everything cdc committed on its way out, which its last confirmation may cover.
	rec.drain()
	if !caughtUp {
		t.Errorf("watermarks never passed the last write (%s): the checks below may show loss", end)
	}

	regressions, wmRecords := rec.checkMonotonic(t)
	slotChecked, slotAhead := rec.checkSlotNeverAhead(t, samples)

	conn := testenv.Conn(t, db)
	exactlyOnce := sc.delivery == "exactly-once"
	var dups, loss []string
	changes, totalDups := 0, 0
	for _, tbl := range allTables {
		topic := change.TopicName(prefix, ids[tbl])
		recs := readTopic(t, brokers, topic)
		rep := analyse(t, tbl, recs, exactlyOnce)
		missing, extra, diff, rows := compareWithTable(t, conn, tbl, rep)
		t.Logf("%s: %d records (%d snapshot rows over all attempts), %d changes, %d duplicates, %d out of order; table %d rows: %d missing, %d extra, %d different",
			tbl, rep.records, rep.snapshot, rep.changes, rep.duplicates, rep.disorder, rows, missing, extra, diff)
		changes += rep.changes
		totalDups += rep.duplicates
		dups = append(dups, fmt.Sprintf("%s:%d", strings.TrimPrefix(tbl, "public."), rep.duplicates))
		loss = append(loss, fmt.Sprintf("%s:%d/%d/%d", strings.TrimPrefix(tbl, "public."), missing, extra, diff))
	}
	if exactlyOnce && totalDups > 0 {
		t.Errorf("exactly-once: %d changes published more than once (%s)", totalDups, strings.Join(dups, " "))
	}

	kills := 0
	for _, n := range tl.killsByPhase {
		kills += n
	}
	summary := fmt.Sprintf("fault summary [%s, watermark interval %s] seed=%d kills=%d (initial snapshot %d, added table's copy %d, streaming %d) "+
		"cdc_restarts=%d unplanned_exits=%d broker_restarts=%d (long outages %d) pg_restarts=%d cuts=pg:%d,kafka:%d "+
		"changes_checked=%d duplicates=%s missing/extra/different=%s watermark_records=%d watermark_regressions=%d "+
		"slot_ahead=%d/%d replication_reconnects=%d pipeline_restarts=%d snapshot_retries=%d workload=[%s] wall=%s",
		sc.delivery, sc.interval, seed, kills, tl.killsByPhase["initial snapshot"], tl.killsByPhase["added table's copy"], tl.killsByPhase["streaming"],
		sup.restarts, sup.unplanned, tl.brokerRestarts, tl.outages, tl.pgRestarts, tl.pgCuts, tl.kafkaCuts,
		changes, strings.Join(dups, ","), strings.Join(loss, ","), wmRecords, regressions,
		slotAhead, slotChecked, sup.count("replication connection lost; reconnecting"), sup.count("pipeline failed; restarting"),
		sup.count("snapshot interrupted; copying its tables again"), wl.summary(), time.Since(start).Round(time.Second))
	t.Log(summary)
	fmt.Fprintln(os.Stderr, summary)
}

func currentLSN(t testing.TB, dbURL string) change.LSN {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := change.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
