package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/wait"
	"github.com/tidemark/cdc/pkg/watermark"
)

// bigRowsForTenSeconds sizes the added table so that its copy with one worker takes more than
// ten seconds on the 2-core machines this suite runs on (2M rows took 13 s on an idle one;
// 2.5M leaves room for a faster machine).
const bigRowsForTenSeconds = 2_500_000

// recorder follows the watermark topic and keeps every record.
type recorder struct {
	mu   sync.Mutex
	recs []watermark.Record
	stop func()
	done chan struct{}
}

func (e *env) recordWatermarks() *recorder {
	w, err := wait.New(e.brokers, e.watermarkTopic())
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer w.Close()
		for ctx.Err() == nil {
			if err := w.PollRecords(ctx, func(rec watermark.Record) {
				r.mu.Lock()
				r.recs = append(r.recs, rec)
				r.mu.Unlock()
			}); err != nil && ctx.Err() == nil {
				e.t.Errorf("follow watermarks: %v", err)
				return
			}
		}
	}()
	e.t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func (r *recorder) all() []watermark.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]watermark.Record(nil), r.recs...)
}

// first returns the first record of e matching ok, waiting up to timeout.
func (r *recorder) first(t testing.TB, timeout time.Duration, e change.ExportID, what string, ok func(watermark.Record) bool) watermark.Record {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, rec := range r.all() {
			if rec.Export == e && ok(rec) {
				return rec
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no watermark record of %s with %s within %s", e, what, timeout)
	return watermark.Record{}
}

// smallWriter writes steadily to the small tables and to big, ~100 transactions per second.
func (e *env) smallWriter(ctx context.Context, bigRows int64) (stop func()) {
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		e.t.Fatal(err)
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			var err error
			switch {
			case i%2 == 0:
				_, err = conn.Exec(ctx, `INSERT INTO small_a (name, qty) VALUES ('w', $1)`, i)
			case i%4 == 1:
				_, err = conn.Exec(ctx, `UPDATE small_b SET doc = jsonb_set(doc, '{w}', to_jsonb($1::int)) WHERE id = $2`, i, 1+rng.IntN(500))
			case bigRows > 0 && i%4 == 3:
				id := 1 + rng.Int64N(bigRows)
				_, err = conn.Exec(ctx, `WITH d AS (DELETE FROM big WHERE id = $1) UPDATE big SET k = k + 1 WHERE id = $2`, id, id+1)
			default:
				_, err = conn.Exec(ctx, `UPDATE small_a SET qty = qty + 1 WHERE id = $1`, 1+rng.IntN(1000))
			}
			if err != nil && ctx.Err() == nil {
				e.t.Errorf("writer: %v", err)
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

var (
	smallA = change.ExportID{Schema: "public", Table: "small_a"}
	smallB = change.ExportID{Schema: "public", Table: "small_b"}
	bigID  = change.ExportID{Schema: "public", Table: "big"}
)

func (e *env) createWatermarkTables(bigRows int) {
	e.exec(
		`CREATE TABLE small_a (id serial PRIMARY KEY, name text, qty int)`,
		`INSERT INTO small_a (name, qty) SELECT 'name ' || g, g FROM generate_series(1, 1000) g`,
		`CREATE TABLE small_b (id int PRIMARY KEY, doc jsonb)`,
		`INSERT INTO small_b SELECT g, jsonb_build_object('g', g) FROM generate_series(1, 500) g`,
		`CREATE TABLE big (id bigint PRIMARY KEY, k int NOT NULL, v text, n numeric(12,2))`,
		fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, md5(g::text) || repeat('x', 40), g / 7.0 FROM generate_series(1, %d) g`, bigRows),
		`ANALYZE`,
	)
}

// copyWindow is the big table's copy: from its snapshot start to its finish.
func copyWindow(t testing.TB, r *recorder) (start, end time.Time, hydratedAt time.Time) {
	t.Helper()
	hyd := r.first(t, 5*time.Minute, bigID, "state hydrated", func(rec watermark.Record) bool {
		return rec.State == watermark.StateHydrated
	})
	if hyd.Snapshot == nil || hyd.Snapshot.FinishedAt == nil {
		t.Fatalf("hydrated record of big lacks snapshot times: %+v", hyd)
	}
	return hyd.Snapshot.StartedAt, *hyd.Snapshot.FinishedAt, hyd.Time
}

// advances counts how often e's watermark increased in records stamped within [from, to].
func advances(recs []watermark.Record, e change.ExportID, from, to time.Time) (n int, values []string) {
	var last *change.LSN
	for _, r := range recs {
		if r.Export != e || r.Watermark == nil || r.Time.Before(from) || r.Time.After(to) {
			continue
		}
		if last != nil && *r.Watermark > *last {
			n++
		}
		if last == nil || *r.Watermark != *last {
			values = append(values, r.Watermark.String())
		}
		w := *r.Watermark
		last = &w
	}
	return n, values
}

func TestAddTableWhileRunning(t *testing.T) {
	for _, mode := range []string{"independent", "global"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			e.createWatermarkTables(bigRowsForTenSeconds)
			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.small_a,public.small_b"
			vars["CDC_SNAPSHOT_WORKERS"] = "1"
			vars["CDC_WATERMARK_MODE"] = mode
			rec := e.recordWatermarks()
			p := e.startCDC(vars)
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b")

			stopWriter := e.smallWriter(ctx, bigRowsForTenSeconds)
			clk := startClock()
			e.exec(`ALTER PUBLICATION it_pub ADD TABLE big`)
			start, end, hydratedAt := copyWindow(t, rec)
			// Progress is paced by cdc's monotonic clock, the copy's stamps are wall-clock times.
			ran := clk.running(t, "big's copy", end.Sub(start))
			time.Sleep(2 * time.Second)
			stopWriter()
			lsn := e.currentLSN(ctx)
			e.waitFor(p, 2*time.Minute, lsn, "public.small_a", "public.small_b", "public.big")
			all := rec.all()

			copyTook := end.Sub(start)
			t.Logf("big copy took %s (hydrated at +%s)", copyTook, hydratedAt.Sub(start))
			if ran < 10*time.Second {
				t.Errorf("the added table's copy ran %s; the scenario needs at least 10s (raise bigRowsForTenSeconds)", ran)
			}
			// Long copies report progress at least every 10 seconds: rows, percent, rate, ETA.
			progress := 0
			for _, line := range strings.Split(p.log.String(), "\n") {
				// The finish line counts too: it closes the last interval.
				if (strings.Contains(line, "snapshot of table in progress") || strings.Contains(line, "snapshot of table finished")) && strings.Contains(line, "export=public.big") &&
					strings.Contains(line, "percent=") && strings.Contains(line, "eta=") {
					progress++
				}
			}
			if want := int(ran / (10 * time.Second)); progress < want {
				t.Errorf("%d progress lines for big's copy of %s (stamps %s apart), want at least %d", progress, ran, copyTook, want)
			}
			// The big table has no watermark before it is hydrated.
			for _, r := range all {
				if r.Export == bigID && r.State == watermark.StateHydrating && r.Watermark != nil {
					t.Errorf("big published watermark %s while hydrating", r.Watermark)
				}
			}
			for _, small := range []change.ExportID{smallA, smallB} {
				// A chunked copy is finished and hydrated in one transaction: the global
				// watermark moves in the record written at its finish time, not before.
				n, values := advances(all, small, start, end.Add(-time.Microsecond))
				if len(values) > 12 {
					values = append(append(values[:6:6], "…"), values[len(values)-6:]...)
				}
				t.Logf("%s: %d watermark advances during the copy: %s", small, n, strings.Join(values, " "))
				switch mode {
				case "independent":
					if n < 5 {
						t.Errorf("%s advanced %d times during the %s copy, want >= 5", small, n, copyTook)
					}
				case "global":
					if n != 0 {
						t.Errorf("%s advanced %d times during the copy in global mode, want 0", small, n)
					}
				}
			}
			if mode == "global" {
				// After the copy, every Due publishes one W for all live exports.
				byTime := map[time.Time]map[change.LSN]bool{}
				for _, r := range all {
					if r.Time.After(hydratedAt) && r.Watermark != nil && r.State == watermark.StateHydrated {
						if byTime[r.Time] == nil {
							byTime[r.Time] = map[change.LSN]bool{}
						}
						byTime[r.Time][*r.Watermark] = true
					}
				}
				for ts, ws := range byTime {
					if len(ws) > 1 {
						t.Errorf("global mode: records written at %s carry different watermarks %v", ts.Format(time.StampMilli), ws)
					}
				}
				if len(byTime) == 0 {
					t.Errorf("global mode: no records after big was hydrated")
				}
			}
			e.assertTopicsEqualTables("public.small_a", "public.small_b", "public.big")
		})
	}
}

// addedCopy is a running cdc publishing the small tables, a steady writer, and big (bigRows rows)
// just added to the publication: its copy has started.
type addedCopy struct {
	vars map[string]string
	rec  *recorder
	p    *proc
	// stopWriter stops the writer; it is also called at cleanup if the test did not.
	stopWriter func()
}

func (e *env) startAddedCopy(bigRows int, strategy string) *addedCopy {
	e.t.Helper()
	ctx := e.t.Context()
	e.createWatermarkTables(bigRows)
	a := &addedCopy{vars: e.baseVars(), rec: e.recordWatermarks()}
	a.vars["CDC_TABLES"] = "public.small_a,public.small_b"
	a.vars["CDC_SNAPSHOT_WORKERS"] = "1"
	a.vars["CDC_SNAPSHOT_STRATEGY"] = strategy
	a.p = e.startCDC(a.vars)
	e.waitFor(a.p, 2*time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b")

	stop := e.smallWriter(ctx, int64(bigRows))
	var once sync.Once
	a.stopWriter = func() { once.Do(stop) }
	e.t.Cleanup(a.stopWriter)
	e.exec(`ALTER PUBLICATION it_pub ADD TABLE big`)
	a.rec.first(e.t, time.Minute, bigID, "state hydrating", func(r watermark.Record) bool { return r.State == watermark.StateHydrating })
	return a
}

func TestKilledDuringAddedCopy(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	// Long enough to be killed in the middle of its copy; the ten-second scenario is above.
	// The copy strategy starts over after a crash (chunked copies resume: chunked_test.go).
	a := e.startAddedCopy(600_000, "copy")
	vars, rec, p := a.vars, a.rec, a.p
	time.Sleep(time.Second)
	p.stop(syscall.SIGKILL)

	// What Kafka holds at the kill: the last watermark of each small table, and where their
	// topics end.
	latest := e.latestWatermarks()
	if latest[bigID].State != watermark.StateHydrating {
		t.Fatalf("big was %s at the kill; the kill must come during its copy (raise bigRows)", latest[bigID].State)
	}
	ends := map[change.ExportID]map[int32]int64{}
	for _, s := range []change.ExportID{smallA, smallB} {
		ends[s] = e.endOffsets(e.topic(s.String()))
		if latest[s].Watermark == nil {
			t.Fatalf("%s had no watermark before the kill: %+v", s, latest[s])
		}
	}
	time.Sleep(time.Second)
	p2 := e.startCDC(vars)
	hyd := rec.first(t, 5*time.Minute, bigID, "hydrated attempt 2", func(r watermark.Record) bool {
		return r.State == watermark.StateHydrated && r.Snapshot != nil && r.Snapshot.Attempt >= 2
	})
	t.Logf("big hydrated on attempt %d after the restart", hyd.Snapshot.Attempt)
	a.stopWriter()
	e.waitFor(p2, 2*time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b", "public.big")

	for _, s := range []change.ExportID{smallA, smallB} {
		w := *latest[s].Watermark
		below := 0
		for _, r := range e.readTopic(e.topic(s.String())) {
			if r.Offset < ends[s][r.Partition] {
				continue
			}
			env := decode(t, r)
			if env != nil && change.LSN(env.Source.LSN) < w {
				below++
			}
		}
		if below > 0 {
			t.Errorf("%s: %d records below its watermark %s were published again after the restart", s, below, w)
		}
	}
	e.assertTopicsEqualTables("public.small_a", "public.small_b", "public.big")
}

// latestWatermarks reads the watermark topic to its end: the last record of each export, as a
// consumer reads it (quiet records applied).
func (e *env) latestWatermarks() map[change.ExportID]watermark.Record {
	e.t.Helper()
	view := watermark.NewView()
	for _, r := range e.readTopic(e.watermarkTopic()) {
		if _, err := view.Add(r.Value); err != nil {
			e.t.Fatal(err)
		}
	}
	return view.All()
}

// endOffsets lists the end offset of every partition of topic.
func (e *env) endOffsets(topic string) map[int32]int64 {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// TestRemoveAndReAddTable: a table dropped from the publication gets a final removed record;
// added again, it is copied anew and rows deleted while it was out are reconciled away.
func TestRemoveAndReAddTable(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createWatermarkTables(0)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.small_a,public.small_b"
	rec := e.recordWatermarks()
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b")

	e.exec(`ALTER PUBLICATION it_pub DROP TABLE small_b`)
	removed := rec.first(t, time.Minute, smallB, "state removed", func(r watermark.Record) bool { return r.State == watermark.StateRemoved })
	t.Logf("small_b removed with final watermark %v", removed.Watermark)

	// While it is out: rows deleted and changed, none of it streamed.
	e.exec(`DELETE FROM small_b WHERE id <= 100`, `UPDATE small_b SET doc = '{"changed": true}' WHERE id > 400`)
	e.exec(`INSERT INTO small_a (name, qty) VALUES ('still flowing', 1)`)
	e.waitFor(p, time.Minute, e.currentLSN(ctx), "public.small_a")
	for _, r := range rec.all() {
		if r.Export == smallB && r.Time.After(removed.Time) {
			t.Errorf("record for small_b after its removed record: %+v", r)
		}
	}

	e.exec(`ALTER PUBLICATION it_pub ADD TABLE small_b`)
	hyd := rec.first(t, 2*time.Minute, smallB, "hydrated again", func(r watermark.Record) bool {
		return r.State == watermark.StateHydrated && r.Time.After(removed.Time)
	})
	if hyd.Snapshot == nil || hyd.Snapshot.Attempt < 2 {
		t.Errorf("re-added small_b hydrated with snapshot %+v, want attempt >= 2", hyd.Snapshot)
	}
	e.waitFor(p, time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b")
	if !strings.Contains(p.log.String(), "reconciled rows of earlier snapshot attempts") {
		t.Errorf("no reconcile logged for the re-added table")
	}
	e.assertTopicsEqualTables("public.small_a", "public.small_b")
}

// TestQuietTablesAdvance: when only tables outside the publication are written, the exported
// tables' watermarks still advance (keepalive WAL end, nothing in flight) and the slot is
// confirmed along, so it pins no WAL.
func TestQuietTablesAdvance(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(`CREATE TABLE quiet (id int PRIMARY KEY)`, `INSERT INTO quiet VALUES (1)`, `CREATE TABLE other (id serial PRIMARY KEY, v text)`)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.quiet"
	p := e.startCDC(vars)
	e.waitFor(p, time.Minute, e.currentLSN(ctx), "public.quiet")
	ends := e.endOffsets(e.topic("public.quiet"))

	e.exec(`INSERT INTO other (v) SELECT md5(g::text) FROM generate_series(1, 20000) g`)
	lsn := e.currentLSN(ctx)
	recs := e.waitFor(p, time.Minute, lsn, "public.quiet")
	t.Logf("quiet's watermark reached %s past unrelated writes ending at %s", recs[change.ExportID{Schema: "public", Table: "quiet"}].Watermark, lsn)
	if got := e.endOffsets(e.topic("public.quiet")); got[0] != ends[0] {
		t.Errorf("quiet's topic moved from %v to %v without changes to the table", ends, got)
	}
	deadline := time.Now().Add(30 * time.Second)
	c := e.conn()
	for e.slotConfirmed(ctx, c) < lsn {
		if time.Now().After(deadline) {
			t.Fatalf("slot confirmed at %s, still below %s 30s after unrelated writes", e.slotConfirmed(ctx, c), lsn)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
