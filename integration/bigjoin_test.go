package integration

import (
	"bufio"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// TestBigJoin is a large join under load. tidemark-apply keeps a replica of the bank test's
// accounts and ledger (bank_test.go) while 4 writers run transfers between accounts, paced;
// then a table big (id bigint primary key, pad text: N rows of about 100 bytes) is added to
// the publication, and the applier, which has chosen it too, loads its copy and joins it.
//
// The applier's first cut waits for every chosen table (pkg/consumer's Config.WaitAll, which
// tidemark-apply sets when APPLY_TABLES is set), and big is not in the publication yet: so
// the applier starts with APPLY_TABLES=accounts,ledger, and once it has applied its first cut
// it is stopped and started again with big added. The restart resumes from the progress row
// (a resumed reader does not wait for every table), and big joins when its copy is loaded.
//
// Checked, on the replica sampled over and over in REPEATABLE READ:
//   - the bank invariant (bankCheckSQL) holds in every sample;
//   - in the same snapshot, big holds 0 rows (before it joins) or exactly N (after), never a
//     count in between, and never 0 again once it held N: the load is invisible until the cut
//     that joins it commits, and then visible whole.
//
// At the end the replica equals the source (accounts and ledger row by row, big by row count
// and a checksum), and the progress row counts exactly the committed transfers. Reported, not
// asserted (speed targets are not test assertions): the peak RSS (VmHWM, sampled) of
// tidemark-apply and cdc, target 256 MiB whatever N; the load's apply rate, from the applier's
// first load part ("loading a table's copy") to the cut that joins big ("table joined"), in
// rows per second, with tidemark-apply's CPU time meanwhile, against a plain COPY of the same
// rows into a fresh table of the replica's database at the end of the run (writers and
// samplers stopped), target ratio 0.8; and the cut lag of the transfers (source commit to
// visible in the replica) while big is copied and loaded, target p99 below 1 s. The peak RSS
// is asserted only against a generous bound (bigJoinRSSLimit) that no N should reach. The
// sampler counts big in every sample, up to about half of one core for a large N (a count
// before the join scans the load's uncommitted rows too), which the load competes with.
//
// Sizes (CI default; the full size in brackets):
//
//	CDC_BIGJOIN_ROWS  300000  [20000000]  rows of big
//	CDC_BIGJOIN_RATE  100                 transfers per second, all writers together
func TestBigJoin(t *testing.T) {
	rows := bankInt(t, "CDC_BIGJOIN_ROWS", 300_000)
	rate := bankInt(t, "CDC_BIGJOIN_RATE", 100)
	const accounts = 1000
	if rows == 0 {
		t.Fatal("CDC_BIGJOIN_ROWS: want at least 1 row")
	}
	t.Logf("big: %d rows; transfers: %d/s between %d accounts", rows, rate, accounts)
	e := newEnv(t)
	ctx := t.Context()

	const bigSchema = `CREATE TABLE big (id bigint PRIMARY KEY, pad text);`
	e.exec(bankSchema+`
CREATE SEQUENCE ledger_id;
ALTER TABLE ledger ALTER id SET DEFAULT nextval('ledger_id');
`+bigSchema,
		fmt.Sprintf(`INSERT INTO accounts SELECT g, %d FROM generate_series(1, %d) g`, bankInitial, accounts),
		`CREATE PUBLICATION it_pub FOR TABLE accounts, ledger`)
	fillStart := time.Now()
	bigFill(t, e.pgURL, rows)
	t.Logf("big filled in the source in %s", time.Since(fillStart).Round(time.Millisecond))
	replica := testenv.NewDB(t)
	testenv.Exec(t, replica, bankSchema, bigSchema)

	rec := e.recordWatermarks()
	rss := &rssWatch{peak: map[string]int64{}, pids: map[string]int{}}
	rctx, stopRSS := context.WithCancel(ctx)
	defer stopRSS()
	go rss.run(rctx)

	cdc := e.startCDC(e.baseVars())
	rss.watch("cdc", cdc.cmd.Process.Pid)
	applyVars := map[string]string{
		"APPLY_TARGET_URL":  replica,
		"APPLY_TABLES":      "public.accounts,public.ledger",
		"CDC_KAFKA_BROKERS": strings.Join(e.brokers, ","),
		"CDC_TOPIC_PREFIX":  e.prefix,
		"APPLY_LOG_FORMAT":  "text",
	}
	applier := e.startBinary(applyBinary, applyVars)
	rss.watch("apply", applier.cmd.Process.Pid)
	e.waitFor(cdc, 2*time.Minute, e.currentLSN(ctx), "public.accounts", "public.ledger")
	waitReplica(t, replica, 2*time.Minute, func(n int64) bool { return n == accounts }, "its first cut (the copy of accounts)")

	// Samplers: the invariant and big's count in one snapshot; the lag of each transfer.
	sctx, stopSamplers := context.WithCancel(ctx)
	defer stopSamplers()
	var commitTimes sync.Map // ledger id -> time the writer saw COMMIT return
	bs := &bigJoinSampler{url: replica, want: bankWant{accounts: accounts, sum: accounts * bankInitial}, rows: int64(rows)}
	ls := &lagSampler{url: replica, commitTimes: &commitTimes}
	var wg sync.WaitGroup
	wg.Go(func() { bs.run(sctx, t) })
	wg.Go(func() { ls.run(sctx, t) })

	stopWriters := make(chan struct{})
	var committed atomic.Int64
	writersDone := make(chan struct{})
	go func() {
		defer close(writersDone)
		bigJoinWorkload(ctx, t, e.pgURL, accounts, rate, stopWriters, &committed, &commitTimes)
	}()
	stopWorkload := sync.OnceFunc(func() { close(stopWriters); <-writersDone })
	defer stopWorkload()

	// The restart with big chosen, under load, then big added to the publication.
	time.Sleep(2 * time.Second)
	applier.stop(syscall.SIGTERM)
	applyVars["APPLY_TABLES"] = "public.accounts,public.ledger,public.big"
	applier = e.startBinary(applyBinary, applyVars)
	rss.watch("apply", applier.cmd.Process.Pid)
	t.Logf("applier restarted with big chosen after %d transfers", committed.Load())
	time.Sleep(2 * time.Second)
	added := time.Now()
	e.exec(`ALTER PUBLICATION it_pub ADD TABLE big`)
	t.Logf("big added to the publication after %d transfers (load average %s)", committed.Load(), loadAvg())
	loadAvgAtAdd := loadAvg()

	// Wait for big to be visible whole in the replica, watching that nothing stops or sticks.
	bigID := change.ExportID{Schema: "public", Table: "big"}
	joinTimeout := 5*time.Minute + time.Duration(rows/2000)*time.Second
	deadline := time.Now().Add(joinTimeout)
	lastNote := time.Now()
	for {
		if full := bs.fullSince(); !full.IsZero() {
			break
		}
		for _, p := range []*proc{cdc, applier} {
			if done, err := p.exited(); done {
				t.Fatalf("%s exited (%v) while big was being copied and loaded", p.cmd.Path, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("big did not become visible in the replica within %s of being added; big's latest watermark: %s; applier: %s; RSS: %s",
				joinTimeout, latestState(rec, bigID), lastLine(applier.log.String(), "export=public.big"), rss.String())
		}
		if time.Since(lastNote) >= 15*time.Second {
			lastNote = time.Now()
			t.Logf("%s since big was added: big's latest watermark %s; applier: %s; RSS %s; load average %s",
				time.Since(added).Round(time.Second), latestState(rec, bigID), lastLine(applier.log.String(), "export=public.big"), rss.String(), loadAvg())
		}
		time.Sleep(200 * time.Millisecond)
	}
	loadAvgAtJoin := loadAvg()
	visible := bs.fullSince()
	t.Logf("big visible whole in the replica %s after it was added (load average %s)", visible.Sub(added).Round(time.Millisecond), loadAvgAtJoin)
	time.Sleep(3 * time.Second) // transfers after the join
	stopWorkload()
	total := committed.Load()
	t.Logf("%d transfers committed", total)

	// The end: the replica equals the source, and counts every transfer once.
	srcN, srcSum := bigChecksum(t, e.pgURL)
	convergeBy := time.Now().Add(3 * time.Minute)
	var diff string
	for {
		diff = bankDiff(t, e.pgURL, replica)
		if n, sum := bigChecksum(t, replica); n != srcN || sum != srcSum {
			diff = strings.TrimPrefix(diff+fmt.Sprintf("; big differs (%d rows, checksum %d; the source %d rows, checksum %d)", n, sum, srcN, srcSum), "; ")
		}
		if diff == "" || time.Now().After(convergeBy) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	stopSamplers()
	wg.Wait()
	stopRSS()
	rss.sample()
	if diff != "" {
		t.Errorf("the replica differs from the source 3 minutes after the last transfer: %s", diff)
	}
	if srcN != int64(rows) {
		t.Errorf("the source's big holds %d rows, want %d", srcN, rows)
	}
	var applied int64
	if err := testenv.Conn(t, replica).QueryRow(ctx, `SELECT txns FROM tidemark_apply_progress WHERE name = 'tidemark-apply'`).Scan(&applied); err != nil {
		t.Fatalf("read progress: %v", err)
	}
	t.Logf("progress table: %d source transactions applied; %d committed", applied, total)
	if applied != total {
		t.Errorf("the applier counted %d source transactions applied, want %d (more: applied twice; fewer: lost)", applied, total)
	}

	// The load, from the applier's log; a plain COPY of the same rows to compare with.
	alog := applier.log.String()
	loadStarts := logTimes(alog, "loading a table's copy", "export=public.big")
	loaded := logTimes(alog, "table loaded:", "export=public.big")
	joined := logTimes(alog, "table joined:", "export=public.big")
	hydrated := time.Time{}
	for _, r := range rec.all() {
		if r.Export == bigID && r.State == watermark.StateHydrated {
			hydrated = r.Time
			break
		}
	}
	var loadFrom, loadTo, loadDone time.Time
	if len(loadStarts) > 0 {
		loadFrom = loadStarts[len(loadStarts)-1]
	}
	if len(joined) > 0 {
		loadTo = joined[len(joined)-1]
	}
	if len(loaded) > 0 {
		loadDone = loaded[len(loaded)-1]
	}
	if len(loadStarts) != 1 || len(joined) != 1 {
		t.Logf("the applier's log holds %d starts of big's load and %d joins (want 1 each): the rate is that of the last", len(loadStarts), len(joined))
	}
	for line := range strings.SplitSeq(alog, "\n") {
		if strings.Contains(line, "public.big") {
			t.Logf("applier: %s", line)
		}
	}
	plain := plainCopy(t, replica, rows)

	bs.mu.Lock()
	defer bs.mu.Unlock()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var duringCopy, duringLoad, all []time.Duration
	for _, l := range ls.lags {
		all = append(all, l.lag)
		if !l.commit.Before(added) && !l.commit.After(visible) {
			duringCopy = append(duringCopy, l.lag)
		}
		if !loadFrom.IsZero() && !l.commit.Before(loadFrom) && !l.commit.After(visible) {
			duringLoad = append(duringLoad, l.lag)
		}
	}
	span := func(from, to time.Time) string {
		if from.IsZero() || to.IsZero() {
			return "?"
		}
		return to.Sub(from).Round(time.Millisecond).String()
	}
	perSec := func(d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return float64(rows) / d.Seconds()
	}
	loadTook := loadTo.Sub(loadFrom)
	if loadFrom.IsZero() || loadTo.IsZero() {
		loadTook = 0
	}
	loadCPU, loadWall := rss.cpuBetween("apply", loadFrom, loadTo)
	ratio := 0.0
	if perSec(plain) > 0 {
		ratio = perSec(loadTook) / perSec(plain)
	}
	t.Logf("REPORT rows=%d rate=%d/s: peak RSS (VmHWM) tidemark-apply %s, cdc %s (target <= 256 MiB); "+
		"replica: %d samples (%s each on average; %d with big empty, %d with big whole), %d invariant violations, %d with big partly there or empty again; "+
		"big added -> hydrated (cdc's copy) %s, -> first load part %s, -> visible whole %s; "+
		"load: first part -> all parts applied %s, -> table joined %s = %.0f rows/s, tidemark-apply's CPU meanwhile %s in %s; plain COPY of the same rows %s = %.0f rows/s; ratio %.2f (target >= 0.8); "+
		"cut lag of transfers committed while big was copied and loaded (added -> visible): %s; while it was loaded (first load part -> visible): %s; whole run: %s; "+
		"load average at add %s, at join %s",
		rows, rate, mib(rss.peakOf("apply")), mib(rss.peakOf("cdc")),
		bs.samples, (bs.busy / time.Duration(max(1, bs.samples))).Round(time.Millisecond), bs.empty, bs.whole, bs.violations, bs.torn,
		span(added, hydrated), span(added, loadFrom), span(added, visible),
		span(loadFrom, loadDone), span(loadFrom, loadTo), perSec(loadTook), loadCPU, loadWall.Round(time.Millisecond), plain.Round(time.Millisecond), perSec(plain), ratio,
		quantiles(duringCopy), quantiles(duringLoad), quantiles(all),
		loadAvgAtAdd, loadAvgAtJoin)

	for _, v := range bs.examples {
		t.Errorf("replica sample: %s", v)
	}
	if bs.violations > 0 {
		t.Errorf("%d of %d replica samples broke the bank invariant", bs.violations, bs.samples)
	}
	if bs.torn > 0 {
		t.Errorf("%d of %d replica samples saw big partly loaded, or empty after it was whole", bs.torn, bs.samples)
	}
	if bs.empty == 0 || bs.whole == 0 {
		t.Errorf("the samples saw big empty %d times and whole %d times: want both, or the check saw no join", bs.empty, bs.whole)
	}
	for _, name := range []string{"apply", "cdc"} {
		if p := rss.peakOf(name); p > bigJoinRSSLimit {
			t.Errorf("peak RSS of %s: %s, above %s", name, mib(p), mib(bigJoinRSSLimit))
		}
	}
}

// bigJoinRSSLimit bounds the peak RSS of tidemark-apply and cdc in TestBigJoin: twice the
// 256 MiB target, so that only memory that grows with the table (or a leak) fails the test.
const bigJoinRSSLimit = 512 << 20

// bigPad is the pad column of big's row id: 100 hex characters, as md5(id::text) repeated
// gives them in SQL (bigFill).
func bigPad(id int) string {
	sum := md5.Sum([]byte(strconv.Itoa(id)))
	h := hex.EncodeToString(sum[:])
	return h + h + h + h[:4]
}

// bigFill fills the source's big with rows 1..n, in steps of a million rows.
func bigFill(t *testing.T, url string, n int) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const step = 1_000_000
	for from := 1; from <= n; from += step {
		to := min(n, from+step-1)
		if _, err := conn.Exec(t.Context(), `INSERT INTO big SELECT g, repeat(md5(g::text), 3) || left(md5(g::text), 4) FROM generate_series($1::bigint, $2::bigint) g`, from, to); err != nil {
			t.Fatalf("fill big: %v", err)
		}
	}
	var pad string
	if err := conn.QueryRow(t.Context(), `SELECT pad FROM big WHERE id = 1`).Scan(&pad); err != nil {
		t.Fatal(err)
	}
	if pad != bigPad(1) {
		t.Fatalf("big's pad in SQL (%q) and in Go (%q) differ: the plain COPY would not copy the same rows", pad, bigPad(1))
	}
}

// plainCopy copies big's n rows, generated again, into a fresh table of the database at url
// with one COPY, and returns how long the COPY took.
func plainCopy(t *testing.T, url string, n int) time.Duration {
	t.Helper()
	testenv.Exec(t, url, `CREATE TABLE big_plain (id bigint PRIMARY KEY, pad text)`)
	conn := testenv.Conn(t, url)
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 1<<20)
		for id := 1; id <= n; id++ {
			w.WriteString(strconv.Itoa(id))
			w.WriteByte('\t')
			w.WriteString(bigPad(id))
			w.WriteByte('\n')
		}
		pw.CloseWithError(w.Flush())
	}()
	start := time.Now()
	tag, err := conn.PgConn().CopyFrom(t.Context(), pr, `COPY big_plain (id, pad) FROM STDIN`)
	took := time.Since(start)
	pr.Close()
	if err != nil {
		t.Fatalf("plain COPY: %v", err)
	}
	if tag.RowsAffected() != int64(n) {
		t.Fatalf("plain COPY: %d rows, want %d", tag.RowsAffected(), n)
	}
	srcN, srcSum := bigChecksum(t, url)
	var plainN, plainSum int64
	if err := conn.QueryRow(t.Context(), `SELECT count(*), coalesce(sum(hashtext(id::text || ':' || pad)), 0)::bigint FROM big_plain`).Scan(&plainN, &plainSum); err != nil {
		t.Fatal(err)
	}
	if plainN != srcN || plainSum != srcSum {
		t.Errorf("the plain COPY's rows differ from big's in the replica (%d rows, checksum %d; big %d, %d): it did not copy the same rows", plainN, plainSum, srcN, srcSum)
	}
	return took
}

// bigChecksum returns big's row count and a checksum of its rows.
func bigChecksum(t *testing.T, url string) (n, sum int64) {
	t.Helper()
	conn := testenv.Conn(t, url)
	defer conn.Close(context.Background())
	if err := conn.QueryRow(t.Context(), `SELECT count(*), coalesce(sum(hashtext(id::text || ':' || pad)), 0)::bigint FROM big`).Scan(&n, &sum); err != nil {
		t.Fatalf("checksum of big: %v", err)
	}
	return n, sum
}

// bigJoinWorkload runs transfers from 4 writers, paced to rate in total (0: unpaced), until
// stop is closed. Each records when its COMMIT returned, by ledger id.
func bigJoinWorkload(ctx context.Context, t *testing.T, url string, accounts, rate int, stop <-chan struct{}, committed *atomic.Int64, commitTimes *sync.Map) {
	const writers = 4
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Errorf("writer %d: %v", w, err)
				return
			}
			defer conn.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for {
				i := next.Add(1)
				if rate > 0 {
					select {
					case <-stop:
						return
					case <-time.After(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate)))):
					}
				}
				select {
				case <-stop:
					return
				default:
				}
				a := 1 + rng.IntN(accounts)
				b := 1 + rng.IntN(accounts-1)
				if b >= a {
					b++
				}
				id, err := transfer(ctx, conn, a, b, int64(1+rng.IntN(100)))
				if err != nil {
					t.Errorf("writer %d: transfer: %v", w, err)
					return
				}
				commitTimes.Store(id, time.Now())
				committed.Add(1)
			}
		})
	}
	wg.Wait()
}

// bigJoinSampler checks the replica in REPEATABLE READ, over and over: the bank invariant,
// and big's row count in the same snapshot (0 or all, and never 0 again after all).
type bigJoinSampler struct {
	url  string
	want bankWant
	rows int64

	mu                  sync.Mutex
	samples, violations int
	empty, whole, torn  int
	examples            []string // the first few violations
	full                time.Time
	busy                time.Duration // in samples, all together
}

// fullSince is when a sample first saw big whole (zero before).
func (s *bigJoinSampler) fullSince() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.full
}

func (s *bigJoinSampler) run(ctx context.Context, t *testing.T) {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		t.Errorf("sampler: %v", err)
		return
	}
	defer conn.Close(context.Background())
	for ctx.Err() == nil {
		began := time.Now()
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			break
		}
		var n, sum, bad, big int64
		err = tx.QueryRow(ctx, bankCheckSQL, bankInitial).Scan(&n, &sum, &bad)
		if err == nil {
			err = tx.QueryRow(ctx, `SELECT count(*) FROM big`).Scan(&big)
		}
		at := time.Now()
		_ = tx.Rollback(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				t.Errorf("sample %s: %v", s.url, err)
			}
			break
		}
		s.mu.Lock()
		s.samples++
		s.busy += time.Since(began)
		var problems []string
		if n != int64(s.want.accounts) || sum != s.want.sum || bad != 0 {
			s.violations++
			problems = append(problems, fmt.Sprintf("%d accounts, sum %d (want %d, %d), %d accounts disagree with the ledger", n, sum, s.want.accounts, s.want.sum, bad))
		}
		switch {
		case big == s.rows:
			s.whole++
			if s.full.IsZero() {
				s.full = at
			}
		case big == 0 && s.full.IsZero():
			s.empty++
		default:
			s.torn++
			problems = append(problems, fmt.Sprintf("big holds %d rows (want 0 before it joins, %d after; whole since %s)", big, s.rows, s.full.Format("15:04:05.000")))
		}
		if len(problems) > 0 && len(s.examples) < 5 {
			s.examples = append(s.examples, at.Format("15:04:05.000")+": "+strings.Join(problems, "; "))
		}
		s.mu.Unlock()
		// At most about half of one core: counting a large big takes a while.
		time.Sleep(max(20*time.Millisecond, time.Since(began)))
	}
}

// lagSampler reads the replica's new ledger rows over and over, and notes for each transfer
// how long after its COMMIT returned in the source it was first seen.
type lagSampler struct {
	url         string
	commitTimes *sync.Map

	mu   sync.Mutex
	lags []bankLag
}

func (s *lagSampler) run(ctx context.Context, t *testing.T) {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		t.Errorf("lag sampler: %v", err)
		return
	}
	defer conn.Close(context.Background())
	var book ledgerBook
	for ctx.Err() == nil {
		rows, err := conn.Query(ctx, `SELECT id FROM ledger WHERE id > $1`, book.low)
		var ids []int64
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		at := time.Now() // after the query: the lag is over- rather than underestimated
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				t.Errorf("lag sample %s: %v", s.url, err)
			}
			break
		}
		s.mu.Lock()
		s.lags = book.note(s.lags, ids, at, s.commitTimes)
		s.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// rssWatch samples the peak RSS (VmHWM) and the CPU time of named processes; a name's peak is
// the highest of every process it named (tidemark-apply is restarted).
type rssWatch struct {
	mu   sync.Mutex
	pids map[string]int
	peak map[string]int64 // bytes
	now  map[string]int64 // VmRSS at the last sample, bytes
	cpu  map[string][]cpuSample
}

// cpuSample is a process's CPU time (user and system) at a moment.
type cpuSample struct {
	at  time.Time
	pid int
	cpu time.Duration
}

func (w *rssWatch) watch(name string, pid int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pids[name] = pid
}

func (w *rssWatch) run(ctx context.Context) {
	for {
		w.sample()
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *rssWatch) sample() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.now == nil {
		w.now, w.cpu = map[string]int64{}, map[string][]cpuSample{}
	}
	for name, pid := range w.pids {
		hwm, rss, ok := procMemory(pid)
		if !ok {
			continue // exited: its last sample stands
		}
		w.peak[name] = max(w.peak[name], hwm)
		w.now[name] = rss
		if cpu, ok := procCPU(pid); ok {
			w.cpu[name] = append(w.cpu[name], cpuSample{time.Now(), pid, cpu})
		}
	}
}

// cpuBetween is the CPU time name's process used from its last sample at or before from to
// its first at or after to, and the time between those samples (0, 0 when there are none, or
// they are of different processes).
func (w *rssWatch) cpuBetween(name string, from, to time.Time) (cpu, wall time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var a, b *cpuSample
	for i := range w.cpu[name] {
		s := &w.cpu[name][i]
		if !s.at.After(from) {
			a = s
		}
		if b == nil && !s.at.Before(to) {
			b = s
		}
	}
	if a == nil || b == nil || a.pid != b.pid {
		return 0, 0
	}
	return b.cpu - a.cpu, b.at.Sub(a.at)
}

func (w *rssWatch) peakOf(name string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak[name]
}

func (w *rssWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("apply %s (peak %s), cdc %s (peak %s)", mib(w.now["apply"]), mib(w.peak["apply"]), mib(w.now["cdc"]), mib(w.peak["cdc"]))
}

// procMemory reads VmHWM and VmRSS of pid from /proc, in bytes.
func procMemory(pid int) (hwm, rss int64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, value, found := strings.Cut(line, ":")
		if !found || name != "VmHWM" && name != "VmRSS" {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			continue
		}
		if name == "VmHWM" {
			hwm = kb << 10
		} else {
			rss = kb << 10
		}
	}
	return hwm, rss, hwm > 0
}

// procCPU reads the user and system CPU time of pid from /proc/<pid>/stat (in clock ticks,
// USER_HZ, 100 a second on Linux).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, state; utime and stime are 14 and 15
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * 10 * time.Millisecond, true
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// logTimes returns the times of the lines of a text log (log/slog's text handler) that
// contain every one of parts.
func logTimes(log string, parts ...string) []time.Time {
	var out []time.Time
	for line := range strings.SplitSeq(log, "\n") {
		match := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				match = false
				break
			}
		}
		if !match || !strings.HasPrefix(line, "time=") {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if ts, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
			out = append(out, ts)
		}
	}
	return out
}

// lastLine is the last line of log that contains part, or "-".
func lastLine(log, part string) string {
	last := "-"
	for line := range strings.SplitSeq(log, "\n") {
		if strings.Contains(line, part) {
			last = line
		}
	}
	return last
}

// latestState describes e's latest watermark record.
func latestState(rec *recorder, e change.ExportID) string {
	recs := rec.all()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Export == e {
			return fmt.Sprintf("%s at %s", recs[i].State, recs[i].Time.Format("15:04:05.000"))
		}
	}
	return "none"
}
