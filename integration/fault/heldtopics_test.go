package fault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// heldFor is how long TestTopicCreationHeldBack holds back topic creation.
const heldFor = 30 * time.Second

// TestTopicCreationHeldBack adds a table to the publication while the broker's answer to topic
// creation is held back for 30 s (a HoldProxy in front of the broker holds every CreateTopics
// request, which franz-go sends on a connection of its own, and nothing else), and checks that the
// tables already streaming do not wait for it: the watermark lag of the changes committed to
// them meanwhile (from the commit until the watermark topic shows their table's watermark at or
// past it) stays under 1 s at the 99th percentile. The added table is hydrated once the hold is
// released, and nothing is published twice.
func TestTopicCreationHeldBack(t *testing.T) {
	start := time.Now()
	elapsed := func() time.Duration { return time.Since(start).Round(10 * time.Millisecond) }
	proxy, err := NewHoldProxy("127.0.0.1:0", "", APIKeyCreateTopics)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	// The broker advertises the proxy: every connection of cdc's (and the test's) goes through it.
	srv := testenv.StartPrivate(t, testenv.PrivateOptions{KafkaAdvertisedPort: proxy.Port()})
	proxy.SetTarget(srv.KafkaAddr())
	db := srv.NewDB(t)
	pub := "held_pub"
	// a, b and c are published and stream; d is added during the hold.
	createTables(t, db, pub, 5000, 20_000)
	t.Logf("%s: servers up, tables created", elapsed())

	id := testsvc.RandomHex(4)
	prefix, slot := "held"+id, "held_"+id
	brokers := []string{proxy.Addr()}
	vars := map[string]string{
		"CDC_PG_URL":                    db,
		"CDC_KAFKA_BROKERS":             proxy.Addr(),
		"CDC_PUBLICATION":               pub,
		"CDC_SLOT":                      slot,
		"CDC_TOPIC_PREFIX":              prefix,
		"CDC_DELIVERY":                  "exactly-once",
		"CDC_WATERMARK_INTERVAL":        "200ms",
		"CDC_PUBLICATION_POLL_INTERVAL": "500ms",
		"CDC_SNAPSHOT_WORKERS":          "2",
		"CDC_LOG_FORMAT":                "text",
		"CDC_LOG_LEVEL":                 "info",
	}
	streamed := make([]change.ExportID, len(initialTables))
	for i, tbl := range initialTables {
		streamed[i] = mustExport(t, tbl)
	}
	added := mustExport(t, addedTable)
	addedTopic := change.TopicName(prefix, added)

	rec := startRecorder(t, brokers, prefix+".__watermarks")
	sup := newSupervisor(t, vars)
	sup.start()
	if !waitWatermarks(t, rec, sup, 2*time.Minute, 1, streamed) {
		t.FailNow()
	}
	t.Logf("%s: %s hydrated", elapsed(), strings.Join(initialTables, ", "))

	w := startSteadyWriters(t, db, initialTables)
	sleepChecking(sup, 5*time.Second)

	// The hold: d enters the publication, and its topic cannot be created for heldFor.
	proxy.Hold()
	holdStart := time.Now()
	from := sup.mark("topic creation held back")
	testenv.Exec(t, db, `ALTER PUBLICATION `+pub+` ADD TABLE d`)
	t.Logf("%s: topic creation held back; %s added to the publication", elapsed(), addedTable)
	sleepChecking(sup, time.Until(holdStart.Add(heldFor)))
	// Just before the release: d cannot be hydrated, nor its topic hold its rows.
	dRecord := rec.describe([]change.ExportID{added})
	dHydrated := rec.stateOf(added) == watermark.StateHydrated
	dRows, dTopic := topicEnd(t, brokers, addedTopic)
	held, waiting := proxy.Held(), proxy.Waiting()
	proxy.Release()
	holdEnd := time.Now()
	releaseLSN := currentLSN(t, db)
	t.Logf("%s: hold released after %s: %d CreateTopics frames held (%d waiting at the release, %d seen in all); %s: %s; its topic %s",
		elapsed(), holdEnd.Sub(holdStart).Round(time.Millisecond), held, waiting, proxy.Seen(APIKeyCreateTopics),
		addedTable, dRecord, topicState(dTopic, dRows))
	if held == 0 {
		t.Errorf("the hold caught no CreateTopics request (%d went through the proxy in all): %s's topic was not created through it, so the hold delayed nothing; cdc log since the hold:\n%s",
			proxy.Seen(APIKeyCreateTopics), addedTable, sup.since(from))
	}
	if dHydrated {
		t.Errorf("%s was hydrated while its topic's creation was held back: %s", addedTable, dRecord)
	}
	if dRows > 0 {
		t.Errorf("%s's topic held %d records while its creation was held back", addedTable, dRows)
	}

	// Every change committed during the hold must reach the watermarks before the lag is read.
	caughtUp := waitWatermarks(t, rec, sup, time.Minute, releaseLSN, streamed)
	t.Logf("%s: the streamed tables' watermarks passed the release's WAL position %s (%s after the release)",
		elapsed(), releaseLSN, time.Since(holdEnd).Round(10*time.Millisecond))
	if waitWatermarks(t, rec, sup, time.Minute, 1, []change.ExportID{added}) {
		t.Logf("%s: %s hydrated %s after the release", elapsed(), addedTable, time.Since(holdEnd).Round(10*time.Millisecond))
	}

	commits := w.stop()
	end := currentLSN(t, db)
	finished := waitWatermarks(t, rec, sup, time.Minute, end, append(slices.Clone(streamed), added))
	if code := sup.stop(); code != 0 {
		t.Errorf("cdc exit code after SIGTERM = %d, want 0", code)
	}
	time.Sleep(500 * time.Millisecond) // the final watermark records of the shutdown
	rec.stop()
	if !caughtUp || !finished {
		t.Errorf("watermarks did not catch up (see above): the lag figures count changes they never reached as unreached")
	}

	// The lag of the changes committed to the streamed tables during the hold, and before it.
	var during, before []time.Duration
	unreached := 0
	for i, e := range streamed {
		series := rec.watermarkSeries(e)
		var lags, base []time.Duration
		for _, c := range commits[i] {
			lag, ok := lagOf(series, c)
			switch {
			case !ok && !c.at.Before(holdStart):
				unreached++
			case !ok:
			case c.at.Before(holdStart):
				base = append(base, lag)
			case !c.at.After(holdEnd):
				lags = append(lags, lag)
			}
		}
		t.Logf("%s: watermark lag during the hold: %s; before it: %s", initialTables[i], lagFigures(lags), lagFigures(base))
		during = append(during, lags...)
		before = append(before, base...)
	}
	p99 := percentile(during, 0.99)
	summary := fmt.Sprintf("held topic creation: %s (%d unreached), before the hold: %s; CreateTopics held %d; %s hydrated %s; writer errors %s; wall %s",
		lagFigures(during), unreached, lagFigures(before), held, addedTable, rec.hydratedAfter(added, holdEnd), w.errors(), time.Since(start).Round(time.Second))
	t.Log(summary)
	if len(during) == 0 {
		t.Errorf("no change committed during the hold reached a watermark")
	} else if p99 >= time.Second {
		t.Errorf("watermark lag p99 of the streamed tables while %s's topic creation was held back %s = %s, want under 1s (p50 %s, max %s, %d changes)",
			addedTable, heldFor, p99.Round(time.Millisecond), percentile(during, 0.5).Round(time.Millisecond),
			percentile(during, 1).Round(time.Millisecond), len(during))
	}

	rec.checkMonotonic(t)
	conn := testenv.Conn(t, db)
	for _, tbl := range allTables {
		recs := readTopic(t, brokers, change.TopicName(prefix, mustExport(t, tbl)))
		rep := analyse(t, tbl, recs, true)
		missing, extra, diff, rows := compareWithTable(t, conn, tbl, rep)
		t.Logf("%s: %d records (%d snapshot rows), %d changes, %d duplicates, %d out of order; table %d rows: %d missing, %d extra, %d different",
			tbl, rep.records, rep.snapshot, rep.changes, rep.duplicates, rep.disorder, rows, missing, extra, diff)
		if rep.duplicates > 0 {
			t.Errorf("exactly-once: %s: %d changes published more than once", tbl, rep.duplicates)
		}
	}
}

// sleepChecking sleeps for d, restarting cdc (as an error) if it exits on its own.
func sleepChecking(sup *supervisor, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		time.Sleep(min(100*time.Millisecond, time.Until(deadline)))
		sup.check()
	}
}

// steadyCommit is one committed change: when the commit returned, and the server's WAL insert
// position right after it, at or past the commit record's end.
type steadyCommit struct {
	at  time.Time
	lsn change.LSN
}

// steadyWriters commit a change to each of their tables every 50-100 ms, one connection per
// table, and record each commit.
type steadyWriters struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	commits [][]steadyCommit
	errs    int
	lastErr error
}

// steadyStatements are the changes a steady writer commits, in turn, to each table of
// createTables: an insert and an update of an existing row (ids 1..500 exist in every table).
var steadyStatements = map[string][2]string{
	"public.a": {`INSERT INTO a (id, k, v, n) VALUES (nextval('a_ids'), $1, md5(random()::text), 1.25)`,
		`UPDATE a SET k = k + 1, v = md5(random()::text) WHERE id = $1`},
	"public.b": {`INSERT INTO b (id, name, qty) VALUES (nextval('b_ids'), 'steady', $1)`,
		`UPDATE b SET qty = qty + 1 WHERE id = $1`},
	"public.c": {`INSERT INTO c (id, doc) VALUES (nextval('c_ids'), jsonb_build_object('steady', $1::int))`,
		`UPDATE c SET doc = jsonb_set(doc, '{n}', to_jsonb(coalesce((doc->>'n')::int, 0) + 1)) WHERE id = $1`},
}

func startSteadyWriters(t testing.TB, dbURL string, tables []string) *steadyWriters {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &steadyWriters{cancel: cancel, commits: make([][]steadyCommit, len(tables))}
	for i, tbl := range tables {
		stmts, ok := steadyStatements[tbl]
		if !ok {
			t.Fatalf("no steady statements for %s", tbl)
		}
		conn := testenv.Conn(t, dbURL)
		w.wg.Add(1)
		go w.run(ctx, conn, i, stmts)
	}
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *steadyWriters) run(ctx context.Context, conn *pgx.Conn, i int, stmts [2]string) {
	defer w.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(50+rng.IntN(51)) * time.Millisecond):
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := conn.Exec(qctx, stmts[n%2], 1+rng.IntN(500))
		at := time.Now()
		var s string
		if err == nil {
			err = conn.QueryRow(qctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s)
		}
		cancel()
		var lsn change.LSN
		if err == nil {
			lsn, err = change.ParseLSN(s)
		}
		w.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				w.errs++
				w.lastErr = err
			}
		} else {
			w.commits[i] = append(w.commits[i], steadyCommit{at: at, lsn: lsn})
		}
		w.mu.Unlock()
	}
}

// stop stops writing and returns each table's commits, in order.
func (w *steadyWriters) stop() [][]steadyCommit {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.commits
}

func (w *steadyWriters) errors() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.errs == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (last: %v)", w.errs, w.lastErr)
}

// wmSeen is one export's watermark as the recorder first saw it reach a value.
type wmSeen struct {
	seen time.Time
	w    change.LSN
}

// watermarkSeries returns e's watermark over time, as read: each entry raises it.
func (r *wmRecorder) watermarkSeries(e change.ExportID) []wmSeen {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []wmSeen
	for _, en := range r.entries {
		if en.checkpoint || en.rec.Export != e || en.rec.Watermark == nil {
			continue
		}
		if n := len(out); n > 0 && *en.rec.Watermark <= out[n-1].w {
			continue
		}
		out = append(out, wmSeen{en.seen, *en.rec.Watermark})
	}
	return out
}

// stateOf is the state of e's latest record ("" when none).
func (r *wmRecorder) stateOf(e change.ExportID) watermark.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest[e].State
}

// hydratedAfter says how long after t the first record saying e is hydrated was read.
func (r *wmRecorder) hydratedAfter(e change.ExportID, t time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, en := range r.entries {
		if !en.checkpoint && en.rec.Export == e && en.rec.State == watermark.StateHydrated {
			return en.seen.Sub(t).Round(10*time.Millisecond).String() + " after the release"
		}
	}
	return "never"
}

// lagOf is how long after c its table's watermark was seen at or past c's position; false when
// it never was.
func lagOf(series []wmSeen, c steadyCommit) (time.Duration, bool) {
	i, _ := slices.BinarySearchFunc(series, c.lsn, func(s wmSeen, l change.LSN) int {
		if s.w < l {
			return -1
		}
		return 1
	})
	if i == len(series) {
		return 0, false
	}
	return series[i].seen.Sub(c.at), true
}

// percentile is the nearest-rank p-quantile of ds (0 when empty).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func lagFigures(ds []time.Duration) string {
	return fmt.Sprintf("%d changes, p50 %s, p99 %s, max %s", len(ds), percentile(ds, 0.5).Round(time.Millisecond),
		percentile(ds, 0.99).Round(time.Millisecond), percentile(ds, 1).Round(time.Millisecond))
}

// topicEnd returns the sum of topic's end offsets (records, markers included) and whether it
// exists.
func topicEnd(t testing.TB, brokers []string, topic string) (int64, bool) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return 0, false
	}
	if err != nil {
		t.Errorf("end offsets of %s: %v", topic, err)
		return 0, true
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, true
}

func topicState(exists bool, records int64) string {
	if !exists {
		return "does not exist"
	}
	return fmt.Sprintf("ends at %d", records)
}
