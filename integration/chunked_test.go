package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// bigWriter changes the big table while it is copied: updates, deletes, inserts of new keys and
// key changes (an update of the primary key), about 100 transactions a second.
func (e *env) bigWriter(ctx context.Context, rows int64) (stop func() string) {
	conn, err := pgx.Connect(ctx, e.pgURL+"&application_name=workload")
	if err != nil {
		e.t.Fatal(err)
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	counts := map[string]int{}
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
		next := rows + 1
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			id := 1 + rng.Int64N(rows)
			var err error
			op := []string{"update", "delete", "insert", "key change"}[i%4]
			switch op {
			case "update":
				_, err = conn.Exec(ctx, `UPDATE big SET k = k + 1, v = 'u' || v WHERE id = $1`, id)
			case "delete":
				_, err = conn.Exec(ctx, `DELETE FROM big WHERE id = $1`, id)
			case "insert":
				_, err = conn.Exec(ctx, `INSERT INTO big VALUES ($1, 1, 'inserted', 1.5)`, next)
				next++
			case "key change":
				// Moves a row from anywhere to past the end: a chunk read before and after.
				_, err = conn.Exec(ctx, `UPDATE big SET id = $2 WHERE id = $1`, id, next)
				next++
			}
			if err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "duplicate key") {
				e.t.Errorf("big writer: %v", err)
				return
			}
			counts[op]++
		}
	}()
	var once sync.Once
	var summary string
	return func() string {
		once.Do(func() {
			close(quit)
			<-done
			summary = fmt.Sprint(counts)
		})
		return summary
	}
}

// countSnapshotRecords counts the snapshot records (op r) of topic: committed ones, and all
// that were ever produced, those of aborted transactions included.
func (e *env) countSnapshotRecords(topic string) (committed, produced int) {
	e.t.Helper()
	for _, iso := range []kgo.IsolationLevel{kgo.ReadCommitted(), kgo.ReadUncommitted()} {
		n := 0
		e.scanTopic(topic, iso, func(r *kgo.Record) {
			if bytes.Contains(r.Value, []byte(`"op":"r"`)) {
				n++
			}
		})
		if iso == kgo.ReadCommitted() {
			committed = n
		} else {
			produced = n
		}
	}
	return committed, produced
}

// scanTopic reads topic from the start to its end (the high watermark) with isolation iso.
func (e *env) scanTopic(topic string, iso kgo.IsolationLevel, fn func(*kgo.Record)) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var ends kadm.ListedOffsets
	if iso == kgo.ReadCommitted() {
		ends, err = adm.ListCommittedOffsets(ctx, topic)
	} else {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			e.t.Fatalf("reading %s: timed out, still waiting for %v", topic, want)
		}
		fs.EachError(func(_ string, _ int32, err error) { e.t.Fatalf("fetch %s: %v", topic, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Attrs.IsControl() {
				// a commit or abort marker
			} else {
				fn(r)
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
}

// xminSampler samples, among the server's backends other than the test's own, the age of the
// oldest transaction that holds back the xmin horizon (backend_xmin set). A transaction's age is
// its age when a sample first saw it (from xact_start) plus the time since on the test's monotonic
// clock: the wall clock steps forward when the machine is paused and resumed (see clock), and a
// transaction's start read again later would carry the step.
type xminSampler struct {
	stop    func()
	mu      sync.Mutex
	max     time.Duration
	samples int
}

func (e *env) sampleXmin(ctx context.Context) *xminSampler {
	conn, err := pgx.Connect(ctx, e.pgURL+"&application_name=workload-sampler")
	if err != nil {
		e.t.Fatal(err)
	}
	s := &xminSampler{}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		firstSeen := map[string]time.Time{} // holder (pid and xact_start) → its start, on the monotonic clock
		for {
			select {
			case <-quit:
				return
			case <-time.After(250 * time.Millisecond):
			}
			rows, err := conn.Query(ctx, `SELECT pid::text || ' ' || xact_start::text AS holder,
					extract(epoch FROM now() - xact_start)::float8 AS age
				FROM pg_stat_activity
				WHERE backend_xmin IS NOT NULL AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
					AND datname = current_database() AND application_name NOT LIKE 'workload%'`)
			type holder struct {
				Holder string
				Age    float64
			}
			var holders []holder
			if err == nil {
				holders, err = pgx.CollectRows(rows, pgx.RowToStructByName[holder])
			}
			if err != nil {
				if ctx.Err() == nil {
					e.t.Errorf("sample xmin: %v", err)
				}
				return
			}
			now := time.Now()
			seen := make(map[string]time.Time, len(holders))
			var oldest time.Duration
			for _, h := range holders {
				first, ok := firstSeen[h.Holder]
				if !ok {
					first = now.Add(-time.Duration(h.Age * float64(time.Second)))
				}
				seen[h.Holder] = first
				oldest = max(oldest, now.Sub(first))
			}
			firstSeen = seen
			s.mu.Lock()
			s.max = max(s.max, oldest)
			s.samples++
			s.mu.Unlock()
		}
	}()
	var once sync.Once
	s.stop = func() { once.Do(func() { close(quit); <-done }) }
	e.t.Cleanup(s.stop)
	return s
}

// TestChunkedCopyKilled adds a table of 2,000,000 rows to a running pipeline while two small
// tables take steady writes and the big table takes updates, deletes, inserts and key changes,
// and kills cdc with SIGKILL three times during its copy. Each restart goes on after the last
// durable chunk: the snapshot rows produced over all attempts stay within 1.2 times the
// table's rows; the topic equals the table at the end; the small tables' watermarks advance
// while the big table is copied.
func TestChunkedCopyKilled(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const rows = 2_000_000
	e.createWatermarkTables(rows)
	rec := e.recordWatermarks()
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.small_a,public.small_b"
	vars["CDC_SNAPSHOT_STRATEGY"] = "chunked"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b")

	var once sync.Once
	stopSmallOnce := e.smallWriter(ctx, 0)
	stopSmall := func() { once.Do(stopSmallOnce) }
	defer stopSmall()
	stopBig := e.bigWriter(ctx, rows)
	defer stopBig()
	clk := startClock()
	e.exec(`ALTER PUBLICATION it_pub ADD TABLE big`)

	copying := func(r watermark.Record) bool {
		return r.State == watermark.StateHydrating && r.Snapshot != nil && r.Snapshot.ChunksDone > 0
	}
	rng := rand.New(rand.NewPCG(3, uint64(time.Now().UnixNano())))
	var killedAt []int // chunks done at each kill
	for kill := range 3 {
		// Kill at a random moment once this life published a chunk.
		seen := 0
		if len(killedAt) > 0 {
			seen = killedAt[len(killedAt)-1]
		}
		r := rec.first(t, 2*time.Minute, bigID, fmt.Sprintf("a chunk after kill %d", kill), func(r watermark.Record) bool {
			return copying(r) && r.Snapshot.ChunksDone > seen
		})
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		p.stop(syscall.SIGKILL)
		latest := e.latestWatermarks()[bigID]
		if latest.State != watermark.StateHydrating {
			t.Fatalf("big was %s at kill %d; the kills must come during its copy", latest.State, kill+1)
		}
		killedAt = append(killedAt, latest.Snapshot.ChunksDone)
		t.Logf("kill %d: %d chunks, %d rows durable (first seen %d)", kill+1, latest.Snapshot.ChunksDone, latest.Snapshot.RowsCopied, r.Snapshot.ChunksDone)
		p = e.startCDC(vars)
	}
	hyd := rec.first(t, 5*time.Minute, bigID, "hydrated", func(r watermark.Record) bool { return r.State == watermark.StateHydrated })
	if hyd.Snapshot == nil || hyd.Snapshot.FinishedAt == nil {
		t.Fatalf("hydrated record of big lacks snapshot times: %+v", hyd)
	}
	// The watermark advances per second the machine ran; the copy's stamps are wall-clock times.
	start, end := hyd.Snapshot.StartedAt, *hyd.Snapshot.FinishedAt
	ran := clk.running(t, "big's copy", end.Sub(start))
	if hyd.Snapshot.Attempt != 1 || hyd.Snapshot.Strategy != watermark.StrategyChunked {
		t.Errorf("big hydrated with %+v; want the chunked copy's first attempt, resumed", hyd.Snapshot)
	}
	if n := strings.Count(p.log.String(), "chunked copy resumes"); n != 1 {
		t.Errorf("the last life logged %d resumes of the chunked copy, want 1", n)
	}
	summary := stopBig()
	stopSmall()
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b", "public.big")

	committed, produced := e.countSnapshotRecords(e.topic("public.big"))
	ratio := float64(produced) / rows
	t.Logf("big: %d rows; snapshot records committed %d, produced over all attempts %d (%.3f × the rows); writes during the copy %s",
		rows, committed, produced, ratio, summary)
	if ratio > 1.2 {
		t.Errorf("snapshot records produced over all attempts: %.3f × the table's rows, want at most 1.2", ratio)
	}
	if committed > rows+rows/100 {
		t.Errorf("%d snapshot records committed for %d rows: finished chunks were published again", committed, rows)
	}

	// The small tables' watermarks advanced while big was copied (between the kills too).
	all := rec.all()
	// Progress in the records while copying: chunks, rows, the estimate, rate and ETA.
	progress := 0
	for _, r := range all {
		if r.Export == bigID && copying(r) && r.Snapshot.RowsEstimated > rows/2 && r.Snapshot.RowsPerSecond > 0 && r.Snapshot.ETASeconds != nil {
			progress++
		}
	}
	if progress == 0 {
		t.Errorf("no record of big's copy showed chunks, rows, estimate, rate and ETA together")
	}
	for _, s := range []change.ExportID{smallA, smallB} {
		n, _ := advances(all, s, start, end)
		secs := ran.Seconds()
		t.Logf("%s: watermark advanced %d times in the %.1fs big's copy ran", s, n, secs)
		if float64(n) < secs {
			t.Errorf("%s: watermark advanced only %d times in the %.1fs big's copy ran", s, n, secs)
		}
	}
	e.assertTopicsEqualTables("public.small_a", "public.small_b", "public.big")
}

// TestChunkedNoLongTransaction samples the age of the oldest transaction holding back the
// xmin horizon while a table is copied for over a minute (throttled), with each strategy: a
// chunked copy holds none for longer than a chunk; a copy holds one for the whole copy.
func TestChunkedNoLongTransaction(t *testing.T) {
	for _, strategy := range []string{"chunked", "copy"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := t.Context()
			const rows, perSecond = 330_000, 5000 // 66 s
			e.createWatermarkTables(rows)
			rec := e.recordWatermarks()
			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.small_a,public.small_b,public.big"
			vars["CDC_SNAPSHOT_STRATEGY"] = strategy
			vars["CDC_SNAPSHOT_MAX_ROWS_PER_SECOND"] = fmt.Sprint(perSecond)
			xmin := e.sampleXmin(ctx)
			p := e.startCDC(vars)
			hyd := rec.first(t, 5*time.Minute, bigID, "hydrated", func(r watermark.Record) bool { return r.State == watermark.StateHydrated })
			xmin.stop()
			took := hyd.Snapshot.FinishedAt.Sub(hyd.Snapshot.StartedAt)
			t.Logf("%s: copy of %d rows took %s; oldest transaction holding xmin: %s (%d samples)",
				strategy, rows, took.Round(time.Second), xmin.max.Round(10*time.Millisecond), xmin.samples)
			if took < time.Minute {
				t.Errorf("the copy took %s; the test needs at least a minute (raise rows)", took)
			}
			switch strategy {
			case "chunked":
				if xmin.max >= 30*time.Second {
					t.Errorf("a transaction held xmin for %s during a chunked copy, want < 30s", xmin.max)
				}
			case "copy":
				if xmin.max < 30*time.Second {
					t.Errorf("the copy strategy held xmin for only %s: the sampler does not see the snapshot's transaction", xmin.max)
				}
			}
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.big")
			e.assertTopicsEqualTables("public.big")
		})
	}
}

// TestChunkedCopiesRunTogether adds two tables 2 s apart: the second one's copy starts while
// the first one's is still going.
func TestChunkedCopiesRunTogether(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createWatermarkTables(1_000_000) // about 7 s alone
	e.exec(`CREATE TABLE big2 (LIKE big INCLUDING ALL)`, `INSERT INTO big2 SELECT * FROM big`, `ANALYZE big2`)
	rec := e.recordWatermarks()
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.small_a"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small_a")
	e.exec(`ALTER PUBLICATION it_pub ADD TABLE big`)
	rec.first(t, time.Minute, bigID, "copying", func(r watermark.Record) bool {
		return r.State == watermark.StateHydrating && r.Snapshot != nil && r.Snapshot.RowsCopied > 0
	})
	time.Sleep(2 * time.Second)
	e.exec(`ALTER PUBLICATION it_pub ADD TABLE big2`)
	big2 := change.ExportID{Schema: "public", Table: "big2"}
	first := rec.first(t, time.Minute, big2, "copying", func(r watermark.Record) bool {
		return r.State == watermark.StateHydrating && r.Snapshot != nil && r.Snapshot.RowsCopied > 0
	})
	hyd := rec.first(t, 2*time.Minute, bigID, "hydrated", func(r watermark.Record) bool { return r.State == watermark.StateHydrated })
	t.Logf("big2 had %d rows copied at %s; big finished at %s", first.Snapshot.RowsCopied,
		first.Time.Format(time.RFC3339Nano), hyd.Snapshot.FinishedAt.Format(time.RFC3339Nano))
	if !first.Time.Before(*hyd.Snapshot.FinishedAt) {
		t.Errorf("big2's copy published its first rows at %s, after big's copy finished at %s: the copies ran one after the other",
			first.Time, hyd.Snapshot.FinishedAt)
	}
	rec.first(t, 2*time.Minute, big2, "hydrated", func(r watermark.Record) bool { return r.State == watermark.StateHydrated })
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.big", "public.big2")
	e.assertTopicsEqualTables("public.big")
}

// TestResnapshot copies a hydrated table again on demand (`cdc resnapshot`) while the tables
// take writes: its rows are published again, the topic still equals the table, and the other
// tables' watermarks keep advancing.
func TestResnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const rows = 300_000
	e.createWatermarkTables(rows)
	rec := e.recordWatermarks()
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.small_a,public.small_b,public.big"
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	vars["CDC_HTTP_TOKEN"] = httpToken
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b", "public.big")
	var once sync.Once
	stopSmallOnce := e.smallWriter(ctx, 0)
	stopSmall := func() { once.Do(stopSmallOnce) }
	defer stopSmall()
	stopBig := e.bigWriter(ctx, rows)
	defer stopBig()
	_, before := e.countSnapshotRecords(e.topic("public.big"))

	cmd := exec.Command(cdcBinary, "resnapshot", "public.big")
	cmd.Env = []string{"CDC_HTTP_ADDR=" + vars["CDC_HTTP_ADDR"], "CDC_HTTP_TOKEN=" + httpToken}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cdc resnapshot: %v: %s", err, out)
	}
	t.Logf("cdc resnapshot: %s", strings.TrimSpace(string(out)))
	hyd := rec.first(t, 3*time.Minute, bigID, "hydrated again", func(r watermark.Record) bool {
		return r.State == watermark.StateHydrated && r.Snapshot != nil && r.Snapshot.Attempt == 2
	})
	start, end := hyd.Snapshot.StartedAt, *hyd.Snapshot.FinishedAt
	all := rec.all()
	for _, s := range []change.ExportID{smallA, smallB} {
		if n, _ := advances(all, s, start, end.Add(time.Second)); n == 0 {
			t.Errorf("%s: watermark did not advance during the re-copy (%s to %s)", s, start, end)
		}
	}
	// Asking again while a copy runs, or for a table that is not exported, is refused.
	cmd = exec.Command(cdcBinary, "resnapshot", "public.nosuch")
	cmd.Env = []string{"CDC_HTTP_ADDR=" + vars["CDC_HTTP_ADDR"], "CDC_HTTP_TOKEN=" + httpToken}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "404") {
		t.Errorf("cdc resnapshot of an unknown table: %v: %s; want a 404 and a non-zero exit", err, out)
	}
	stopBig()
	stopSmall()
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b", "public.big")
	_, after := e.countSnapshotRecords(e.topic("public.big"))
	if after-before < rows*9/10 {
		t.Errorf("the re-copy published %d snapshot records for %d rows", after-before, rows)
	}
	e.assertTopicsEqualTables("public.small_a", "public.small_b", "public.big")
}

// freeAddr returns a free 127.0.0.1 port as host:port.
func freeAddr(t testing.TB) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
