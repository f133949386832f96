package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
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

// TestBankShapes is the bank test (bank_test.go) in the shapes users give it. tidemark-apply
// keeps a replica of three chosen tables, whose topics have 3 partitions: two account tables,
// acct_a and acct_b (id primary key, uid unique, balance, and a 4 KiB note stored out of line,
// set when the account is opened and left out by every update that does not change it), and a
// journal of movements between accounts by uid. Four writers run transactions across them:
//
//   - transfers: two accounts (in either table) and the journal row, in one transaction;
//   - key changes: a transfer that also moves one of its accounts to a new primary key
//     (UPDATE ... SET id = <unused id>), before, after or in the same statement as its balance
//     change, some rewriting the note too. The change's two halves (delete of the old key,
//     create of the new) have the same source.sequence and land in any two partitions;
//   - closes: an account is deleted and a new one (new id and uid, in either table) opened with
//     its balance, the journal moving the balance from the old uid to the new;
//   - rollbacks: transfers rolled back.
//
// Meanwhile acct_a and then acct_b are copied again on demand (POST /exports/<table>/resnapshot
// on cdc's HTTP endpoint), tidemark-apply is SIGKILLed after each re-copy has been applied (so
// that it resumes after a re-copy), and cdc is SIGKILLed once. The run is made once per value
// format (json, json-with-schema).
//
// The invariant, checked on the replica in REPEATABLE READ over and over: there are as many
// accounts as at the start, no uid twice, the balances sum to the starting total, and every uid
// (open, closed or initial) holds its initial balance (bankInitial for the first accounts, 0
// for those opened by a close) plus its journal credits minus its debits (0 when closed). A
// table frozen while the others advance, a torn transaction, a half-applied key change or close
// all break it. At the end the replica equals the source, every column (the notes too), the
// applier counted exactly the committed transactions (none applied twice, none lost) and it
// never exited on its own.
//
// Sizes (CI defaults, about a minute a format; the full size in brackets):
//
//	CDC_SHAPES_TXNS        3000   [20000]  transactions, rolled back ones included
//	CDC_SHAPES_ACCOUNTS    1000   [10000]  accounts, half in each table
//	CDC_SHAPES_RATE        100    [200]    transactions per second, all writers together (0: unpaced)
//	CDC_SHAPES_KEY_CHANGES 12     [12]     percent of transactions that change a key
//	CDC_SHAPES_CLOSES      4      [4]      percent that close an account into a new one
//	CDC_SHAPES_ROLLBACKS   5      [5]      percent rolled back
//	CDC_SHAPES_FORMATS     json,json-with-schema
func TestBankShapes(t *testing.T) {
	for _, format := range strings.Split(bankEnv(t, "CDC_SHAPES_FORMATS", "json,json-with-schema"), ",") {
		format = strings.TrimSpace(format)
		t.Run(format, func(t *testing.T) { runBankShapes(t, format) })
	}
}

type shapesSizes struct {
	txns, accounts, rate, keyChanges, closes, rollbacks int
}

// shapesTables are the chosen tables, as the applier is told them.
var shapesTables = []string{"public.acct_a", "public.acct_b", "public.journal"}

const shapesSchema = `
CREATE TABLE acct_a (id int PRIMARY KEY, uid int NOT NULL UNIQUE, balance bigint NOT NULL, note text NOT NULL);
CREATE TABLE acct_b (id int PRIMARY KEY, uid int NOT NULL UNIQUE, balance bigint NOT NULL, note text NOT NULL);
CREATE TABLE journal (id bigint PRIMARY KEY, src int NOT NULL, dst int NOT NULL, amount bigint NOT NULL);`

// shapesNote is the SQL of a note: 4 KiB of md5 text (which pglz does not shrink) made of the
// text parameters $n and $n+1 (an account's uid and a salt).
func shapesNote(n int) string {
	return fmt.Sprintf(`(SELECT string_agg(md5($%d::text || $%d::text || i), '') FROM generate_series(1, 128) i)`, n, n+1)
}

func runBankShapes(t *testing.T, format string) {
	sz := shapesSizes{
		txns: bankInt(t, "CDC_SHAPES_TXNS", 3000), accounts: bankInt(t, "CDC_SHAPES_ACCOUNTS", 1000),
		rate: bankInt(t, "CDC_SHAPES_RATE", 100), keyChanges: bankInt(t, "CDC_SHAPES_KEY_CHANGES", 12),
		closes: bankInt(t, "CDC_SHAPES_CLOSES", 4), rollbacks: bankInt(t, "CDC_SHAPES_ROLLBACKS", 5),
	}
	if sz.accounts < 100 || sz.keyChanges+sz.closes+sz.rollbacks > 100 {
		t.Fatalf("sizes %+v: want at least 100 accounts and at most 100 percent of special transactions", sz)
	}
	t.Logf("format %s, sizes %+v", format, sz)
	e := newEnv(t)
	ctx := t.Context()
	half := sz.accounts / 2
	e.exec(shapesSchema,
		// Out of line whatever the size: an update that leaves the note alone does not carry it.
		`ALTER TABLE acct_a ALTER note SET STORAGE EXTERNAL`,
		`ALTER TABLE acct_b ALTER note SET STORAGE EXTERNAL`,
		`CREATE SEQUENCE journal_id`,
		`ALTER TABLE journal ALTER id SET DEFAULT nextval('journal_id')`,
		fmt.Sprintf(`INSERT INTO acct_a SELECT g, g, %d, (SELECT string_agg(md5(g::text || '-' || i), '') FROM generate_series(1, 128) i)
			FROM generate_series(1, %d) g`, bankInitial, half),
		fmt.Sprintf(`INSERT INTO acct_b SELECT g, %[1]d + g, %[2]d, (SELECT string_agg(md5((%[1]d + g)::text || '-' || i), '') FROM generate_series(1, 128) i)
			FROM generate_series(1, %[3]d) g`, half, bankInitial, sz.accounts-half),
		`ANALYZE`,
		`CREATE PUBLICATION it_pub FOR TABLE acct_a, acct_b, journal`)
	var toast int64
	if err := e.conn().QueryRow(ctx, `SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'acct_a'`).Scan(&toast); err != nil || toast == 0 {
		t.Fatalf("acct_a's notes are not TOASTed (toast relation %d bytes, %v): the scenario needs them out of line", toast, err)
	}
	replica := testenv.NewDB(t)
	testenv.Exec(t, replica, shapesSchema)
	rconn := testenv.Conn(t, replica)

	rec := e.recordWatermarks()
	cdcVars := e.baseVars()
	cdcVars["CDC_TOPIC_PARTITIONS"] = "3"
	cdcVars["CDC_VALUE_FORMAT"] = format
	cdcVars["CDC_HTTP_ADDR"] = freeAddr(t)
	cdcVars["CDC_HTTP_TOKEN"] = httpToken
	cdcVars["CDC_SNAPSHOT_CHUNK_ROWS"] = "100" // a copy of an account table takes several chunks
	applyVars := map[string]string{
		"APPLY_TARGET_URL":  replica,
		"APPLY_TABLES":      strings.Join(shapesTables, ","),
		"CDC_KAFKA_BROKERS": strings.Join(e.brokers, ","),
		"CDC_TOPIC_PREFIX":  e.prefix,
		"APPLY_LOG_FORMAT":  "text",
	}
	cdc := e.startCDC(cdcVars)
	applier := e.startBinary(applyBinary, applyVars)
	e.waitFor(cdc, 2*time.Minute, e.currentLSN(ctx), shapesTables...)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int64
		if err := rconn.QueryRow(ctx, `SELECT (SELECT count(*) FROM acct_a) + (SELECT count(*) FROM acct_b)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == int64(sz.accounts) {
			break
		}
		if done, err := applier.exited(); done {
			t.Fatalf("tidemark-apply exited (%v) before applying the first copies: %s", err, strings.Join(applyTrouble(applier.log.String()), "\n"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica has %d of %d accounts 2 minutes after the start", n, sz.accounts)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The sampler and the workload run in the background; the faults come from here.
	sctx, stopSampler := context.WithCancel(ctx)
	wctx, stopWorkload := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { stopWorkload(); stopSampler(); bg.Wait() }()
	s := &shapesSampler{url: replica, accounts: sz.accounts}
	bg.Go(func() { s.run(sctx, t) })
	book := newShapesBook(sz.accounts)
	var counts shapesCounts
	workloadDone := make(chan struct{})
	bg.Go(func() { defer close(workloadDone); shapesWorkload(wctx, t, e.pgURL, sz, book, &counts) })

	rng := rand.New(rand.NewPCG(uint64(sz.txns), uint64(time.Now().UnixNano())))
	reached := func(frac float64) {
		for counts.started.Load() < int64(frac*float64(sz.txns)) {
			select {
			case <-workloadDone:
				t.Logf("the workload ended before %.0f%% of it", 100*frac)
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	// checkApplier reports an applier that exited on its own (a permanent error).
	checkApplier := func(p *proc, when string) {
		t.Helper()
		if done, err := p.exited(); done {
			t.Errorf("tidemark-apply exited on its own (%v) %s:\n%s", err, when, strings.Join(applyTrouble(p.log.String()), "\n"))
		}
	}
	recopies, applyKills, cdcKills := 0, 0, 0
	recopy := func(table string) {
		t.Helper()
		id, _ := change.ParseExportID(table)
		before := 0
		for _, r := range rec.all() {
			if r.Export == id && r.Snapshot != nil {
				before = max(before, r.Snapshot.Attempt)
			}
		}
		if err := shapesResnapshot(ctx, cdcVars["CDC_HTTP_ADDR"], table); err != nil {
			t.Fatalf("re-copy %s: %v", table, err)
		}
		recopies++
		hyd := rec.first(t, 3*time.Minute, id, "hydrated by the re-copy", func(r watermark.Record) bool {
			return r.State == watermark.StateHydrated && r.Watermark != nil && r.Snapshot != nil && r.Snapshot.Attempt > before
		})
		t.Logf("re-copy of %s (attempt %d) hydrated after %d transactions; copy took %s", table, hyd.Snapshot.Attempt,
			counts.started.Load(), hyd.Snapshot.FinishedAt.Sub(hyd.Snapshot.StartedAt).Round(time.Millisecond))
		// Finished for the applier: it applied a cut at or past the watermark the new copy was
		// hydrated at (a cut that holds the new copy).
		deadline := time.Now().Add(time.Minute)
		for {
			applied, err := shapesAppliedLSN(ctx, rconn)
			if err != nil {
				t.Fatalf("read the progress row: %v", err)
			}
			if applied >= *hyd.Watermark {
				break
			}
			if done, _ := applier.exited(); done {
				break // reported by checkApplier
			}
			if time.Now().After(deadline) {
				t.Errorf("the applier had not applied the re-copy of %s a minute after it was hydrated (its last cut %s, hydrated at %s):\n%s",
					table, applied, hyd.Watermark, strings.Join(applyTrouble(applier.log.String()), "\n"))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// killApply SIGKILLs the applier and starts it again: it resumes from its progress row.
	killApply := func(when string) {
		t.Helper()
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
		checkApplier(applier, when)
		applier.stop(syscall.SIGKILL)
		applyKills++
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		applier = e.startBinary(applyBinary, applyVars)
		t.Logf("tidemark-apply killed and restarted %s, %d transactions", when, counts.started.Load())
	}

	reached(0.15)
	recopy("public.acct_a")
	killApply("after the re-copy of public.acct_a")
	reached(0.45)
	if done, err := cdc.exited(); done {
		t.Errorf("cdc exited on its own (%v) before its SIGKILL", err)
	}
	cdc.stop(syscall.SIGKILL)
	cdcKills++
	time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	cdc = e.startCDC(cdcVars)
	t.Logf("cdc killed and restarted after %d transactions", counts.started.Load())
	reached(0.6)
	recopy("public.acct_b")
	killApply("after the re-copy of public.acct_b")
	<-workloadDone
	committed := counts.committed.Load()
	t.Logf("workload: %d committed (%d transfers, %d key changes, %d closes), %d rolled back",
		committed, counts.transfers.Load(), counts.keyChanges.Load(), counts.closes.Load(), counts.rolledBack.Load())

	// The end: the replica equals the source, every column.
	e.waitFor(cdc, 2*time.Minute, e.currentLSN(ctx), shapesTables...)
	deadline = time.Now().Add(2 * time.Minute)
	var diff, lastLSN, why string
	lastMove := time.Now()
	for {
		diff = shapesDiff(t, e.pgURL, replica)
		if diff == "" {
			break
		}
		var lsn string
		_ = rconn.QueryRow(ctx, `SELECT lsn FROM tidemark_apply_progress WHERE name = 'tidemark-apply'`).Scan(&lsn)
		if lsn != lastLSN {
			lastLSN, lastMove = lsn, time.Now()
		}
		if done, _ := applier.exited(); done {
			why = "the applier exited"
			break
		}
		if time.Since(lastMove) > time.Minute {
			why = fmt.Sprintf("the applier applied no cut for a minute (stuck at %s)", lastLSN)
			break
		}
		if time.Now().After(deadline) {
			why = "2 minutes after cdc had published everything"
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	stopSampler()
	if diff != "" {
		t.Errorf("the replica differs from the source (%s): %s", why, diff)
		for _, line := range applyTrouble(applier.log.String()) {
			t.Errorf("tidemark-apply: %s", line)
		}
	}
	var applied int64
	if err := rconn.QueryRow(ctx, `SELECT txns FROM tidemark_apply_progress WHERE name = 'tidemark-apply'`).Scan(&applied); err != nil {
		t.Fatalf("read progress: %v", err)
	}
	if applied != committed {
		t.Errorf("the applier counted %d source transactions applied, want %d committed (more: applied twice; fewer: lost)", applied, committed)
	}
	checkApplier(applier, "by the end of the run")
	bg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("REPORT format=%s: replica: %d samples, %d invariant violations; %d transactions committed (%d transfers, %d key changes, %d closes), %d rolled back; %d re-copies, %d SIGKILLs of tidemark-apply (each after a re-copy), %d of cdc; progress row: %d transactions applied",
		format, s.samples, s.violations, committed, counts.transfers.Load(), counts.keyChanges.Load(), counts.closes.Load(),
		counts.rolledBack.Load(), recopies, applyKills, cdcKills, applied)
	for _, v := range s.examples {
		t.Errorf("replica sample broke the invariant: %s", v)
	}
	if s.violations > 0 {
		t.Errorf("%d of %d replica samples broke the invariant", s.violations, s.samples)
	}
	if s.samples < 10 {
		t.Errorf("only %d samples of the replica", s.samples)
	}
	// The scenario did what it says.
	if counts.keyChanges.Load() == 0 || counts.closes.Load() == 0 || counts.rolledBack.Load() == 0 || recopies != 2 {
		t.Errorf("the run lacks a shape: %d key changes, %d closes, %d rollbacks, %d re-copies", counts.keyChanges.Load(),
			counts.closes.Load(), counts.rolledBack.Load(), recopies)
	}
}

// shapesResnapshot asks cdc for a new copy of table through its HTTP endpoint, retrying for up
// to a minute while the service cannot take it yet (just restarted: no answer, 503 or 409).
func shapesResnapshot(ctx context.Context, addr, table string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/exports/"+table+"/resnapshot", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+httpToken)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
			if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusConflict {
				return err
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// shapesAppliedLSN reads the LSN of the applier's last cut from its progress row (0 before the
// first).
func shapesAppliedLSN(ctx context.Context, conn *pgx.Conn) (change.LSN, error) {
	var lsn string
	err := conn.QueryRow(ctx, `SELECT lsn FROM tidemark_apply_progress WHERE name = 'tidemark-apply'`).Scan(&lsn)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return change.ParseLSN(lsn)
}

// applyTrouble lists the distinct errors in an applier's log: why its sessions restarted, what
// stopped it.
func applyTrouble(log string) []string {
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "level=ERROR") && !strings.Contains(line, "session ended") && !strings.HasPrefix(line, "tidemark-apply:") {
			continue
		}
		k := line
		if i := strings.Index(line, " err="); i >= 0 {
			k = line[i:]
		}
		if seen[k] || len(out) >= 8 {
			continue
		}
		seen[k] = true
		if len(line) > 600 {
			line = line[:600] + "..."
		}
		out = append(out, line)
	}
	return out
}

// shapesDiff describes how the replica differs from the source, every column of the three
// tables ("" when equal).
func shapesDiff(t *testing.T, source, replica string) string {
	t.Helper()
	var out []string
	for _, table := range []string{"acct_a", "acct_b", "journal"} {
		src, dst := tableText(t, source, table), tableText(t, replica, table)
		missing, extra, differ := 0, 0, 0
		var example string
		for _, id := range slices.Sorted(maps.Keys(src)) {
			row := src[id]
			got, ok := dst[id]
			if !ok {
				missing++
				continue
			}
			var cols []string
			for c, v := range row {
				if got[c] != v {
					cols = append(cols, fmt.Sprintf("%s %.40q vs %.40q", c, v, got[c]))
				}
			}
			if len(cols) > 0 {
				differ++
				if example == "" {
					slices.Sort(cols)
					example = fmt.Sprintf(" (id %s: source vs replica: %s)", id, strings.Join(cols, ", "))
				}
			}
		}
		for id := range dst {
			if _, ok := src[id]; !ok {
				extra++
			}
		}
		if missing+extra+differ > 0 {
			out = append(out, fmt.Sprintf("%s: %d rows in the source, %d in the replica: %d missing, %d extra, %d different%s",
				table, len(src), len(dst), missing, extra, differ, example))
		}
	}
	return strings.Join(out, "; ")
}

// shapesSampler checks the replica's invariant in REPEATABLE READ, over and over.
type shapesSampler struct {
	url      string
	accounts int

	mu                  sync.Mutex
	samples, violations int
	examples            []string // the first few violations
}

// shapesCheckSQL returns the accounts, their distinct uids, the sum of balances and how many
// uids (open, closed or initial) disagree with the journal. $1: the initial balance, $2: the
// initial accounts (uids 1..$2 start with $1, later ones with 0).
const shapesCheckSQL = `
WITH acc AS (SELECT uid, balance FROM acct_a UNION ALL SELECT uid, balance FROM acct_b),
net AS (SELECT uid, sum(d) AS d FROM (SELECT dst AS uid, amount AS d FROM journal UNION ALL SELECT src, -amount FROM journal) x GROUP BY uid),
everyone AS (SELECT uid FROM acc UNION SELECT uid FROM net UNION SELECT generate_series(1, $2::int))
SELECT (SELECT count(*) FROM acc), (SELECT count(DISTINCT uid) FROM acc), (SELECT coalesce(sum(balance), 0) FROM acc)::bigint,
  (SELECT count(*) FROM everyone e LEFT JOIN acc a ON a.uid = e.uid LEFT JOIN net n ON n.uid = e.uid
   WHERE coalesce(a.balance, 0) <> CASE WHEN e.uid <= $2::int THEN $1::bigint ELSE 0 END + coalesce(n.d, 0)),
  (SELECT count(*) FROM journal)`

func (s *shapesSampler) run(ctx context.Context, t *testing.T) {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		t.Errorf("sampler: %v", err)
		return
	}
	defer conn.Close(context.Background())
	wantSum := int64(s.accounts) * bankInitial
	for ctx.Err() == nil {
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			break
		}
		var n, uids, sum, bad, journal int64
		err = tx.QueryRow(ctx, shapesCheckSQL, bankInitial, s.accounts).Scan(&n, &uids, &sum, &bad, &journal)
		_ = tx.Rollback(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				t.Errorf("sample %s: %v", s.url, err)
			}
			break
		}
		s.mu.Lock()
		s.samples++
		if n != int64(s.accounts) || uids != n || sum != wantSum || bad != 0 {
			s.violations++
			if len(s.examples) < 3 {
				s.examples = append(s.examples, fmt.Sprintf("%d accounts with %d distinct uids, sum %d (want %d, %d), %d uids disagree with the journal (%d rows)",
					n, uids, sum, s.accounts, wantSum, bad, journal))
			}
		}
		s.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// shapesCounts counts the workload's transactions by what they did; started counts every
// transaction begun (for the faults' timing).
type shapesCounts struct {
	started, committed, transfers, keyChanges, closes, rolledBack atomic.Int64
}

// shapesAcct is an open account as the writers know it.
type shapesAcct struct {
	uid, id int
	table   string
}

// shapesBook is the writers' view of the open accounts. A writer takes the accounts it changes
// (no other writer touches them meanwhile: no deadlocks, exact ids) and gives them back.
type shapesBook struct {
	mu             sync.Mutex
	uids           []int       // open accounts, any order
	at             map[int]int // uid -> index in uids
	acct           map[int]shapesAcct
	busy           map[int]bool
	nextID, nextUI int
}

func newShapesBook(accounts int) *shapesBook {
	b := &shapesBook{at: map[int]int{}, acct: map[int]shapesAcct{}, busy: map[int]bool{}, nextID: accounts + 1, nextUI: accounts + 1}
	half := accounts / 2
	for uid := 1; uid <= accounts; uid++ {
		a := shapesAcct{uid: uid, id: uid, table: "acct_a"}
		if uid > half {
			a.id, a.table = uid-half, "acct_b"
		}
		b.add(a)
	}
	return b
}

func (b *shapesBook) add(a shapesAcct) {
	b.at[a.uid] = len(b.uids)
	b.uids = append(b.uids, a.uid)
	b.acct[a.uid] = a
}

// take picks n distinct random accounts no other writer holds.
func (b *shapesBook) take(rng *rand.Rand, n int) []shapesAcct {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []shapesAcct
	for len(out) < n {
		uid := b.uids[rng.IntN(len(b.uids))]
		if !b.busy[uid] {
			b.busy[uid] = true
			out = append(out, b.acct[uid])
		}
	}
	return out
}

// ids reserves a new primary key and a new uid.
func (b *shapesBook) ids() (id, uid int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	b.nextUI++
	return b.nextID - 1, b.nextUI - 1
}

// give returns taken accounts: updated holds their state after the transaction, closed the
// uids that no longer exist, opened the accounts opened.
func (b *shapesBook) give(taken, updated []shapesAcct, closed []int, opened []shapesAcct) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range taken {
		delete(b.busy, a.uid)
	}
	for _, a := range updated {
		b.acct[a.uid] = a
	}
	for _, uid := range closed {
		i, last := b.at[uid], len(b.uids)-1
		b.uids[i] = b.uids[last]
		b.at[b.uids[i]] = i
		b.uids = b.uids[:last]
		delete(b.at, uid)
		delete(b.acct, uid)
	}
	for _, a := range opened {
		b.add(a)
	}
}

// shapesWorkload runs sz.txns transactions from 4 writers, paced to sz.rate in total.
func shapesWorkload(ctx context.Context, t *testing.T, url string, sz shapesSizes, book *shapesBook, counts *shapesCounts) {
	const writers = 4
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, url+"&application_name=workload")
			if err != nil {
				t.Errorf("writer %d: %v", w, err)
				return
			}
			defer conn.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for {
				i := next.Add(1)
				if i > int64(sz.txns) || ctx.Err() != nil {
					return
				}
				if sz.rate > 0 {
					if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(sz.rate))); d > 0 {
						time.Sleep(d)
					}
				}
				counts.started.Add(1)
				if err := shapesTxn(ctx, conn, rng, sz, book, counts); err != nil {
					if ctx.Err() == nil {
						t.Errorf("writer %d: %v", w, err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
}

// shapesTxn runs one transaction of a kind drawn from sz's percentages.
func shapesTxn(ctx context.Context, conn *pgx.Conn, rng *rand.Rand, sz shapesSizes, book *shapesBook, counts *shapesCounts) (err error) {
	kind := "transfer"
	switch p := rng.IntN(100); {
	case p < sz.rollbacks:
		kind = "rollback"
	case p < sz.rollbacks+sz.closes:
		kind = "close"
	case p < sz.rollbacks+sz.closes+sz.keyChanges:
		kind = "key change"
	}
	n := 2
	if kind == "close" {
		n = 1
	}
	taken := book.take(rng, n)
	var updated, opened []shapesAcct
	var closed []int
	defer func() {
		if err != nil {
			updated, closed, opened = nil, nil, nil
		}
		book.give(taken, updated, closed, opened)
	}()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	exec1 := func(what, sql string, args ...any) error {
		tag, err := tx.Exec(ctx, sql, args...)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("%d rows", tag.RowsAffected())
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", kind, what, err)
		}
		return nil
	}
	move := func(a shapesAcct, delta int64) error {
		return exec1("balance", `UPDATE `+a.table+` SET balance = balance + $2 WHERE id = $1`, a.id, delta)
	}
	journal := func(src, dst int, amount int64) error {
		return exec1("journal", `INSERT INTO journal (src, dst, amount) VALUES ($1, $2, $3)`, src, dst, amount)
	}
	if kind == "close" {
		// The account's balance moves to a new account (new id and uid) in either table.
		old := taken[0]
		id, uid := book.ids()
		nu := shapesAcct{uid: uid, id: id, table: []string{"acct_a", "acct_b"}[rng.IntN(2)]}
		var bal int64
		if err := tx.QueryRow(ctx, `DELETE FROM `+old.table+` WHERE id = $1 RETURNING balance`, old.id).Scan(&bal); err != nil {
			return fmt.Errorf("close: delete %s id %d: %w", old.table, old.id, err)
		}
		if err := exec1("open", `INSERT INTO `+nu.table+` (id, uid, balance, note) VALUES ($1, $2, $3, `+shapesNote(4)+`)`,
			nu.id, nu.uid, bal, fmt.Sprint(nu.uid), "-"); err != nil {
			return err
		}
		if err := journal(old.uid, nu.uid, bal); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		closed, opened = []int{old.uid}, []shapesAcct{nu}
		counts.committed.Add(1)
		counts.closes.Add(1)
		return nil
	}
	a, b := taken[0], taken[1]
	amount := int64(1 + rng.IntN(100))
	if kind == "key change" {
		// a moves to a new primary key: before its balance change, after it, in the same
		// statement, or after it with a new note (its create then carries every column).
		newID, _ := book.ids()
		rekey := func(set string, args ...any) error {
			if err := exec1("rekey", `UPDATE `+a.table+` SET id = $2`+set+` WHERE id = $1`, append([]any{a.id, newID}, args...)...); err != nil {
				return err
			}
			a.id = newID
			return nil
		}
		debit := func() error { return move(a, -amount) }
		credit := func() error { return move(b, amount) }
		var steps []func() error
		switch rng.IntN(4) {
		case 0:
			steps = []func() error{func() error { return rekey("") }, debit, credit}
		case 1:
			steps = []func() error{debit, credit, func() error { return rekey("") }}
		case 2:
			steps = []func() error{func() error { return rekey(", balance = balance + $3", -amount) }, credit}
		case 3:
			steps = []func() error{debit, credit, func() error {
				return rekey(", note = "+shapesNote(3), fmt.Sprint(a.uid), fmt.Sprintf("-k%d-", newID))
			}}
		}
		for _, step := range steps {
			if err = step(); err != nil {
				break
			}
		}
	} else if err = move(a, -amount); err == nil {
		err = move(b, amount)
	}
	if err == nil {
		err = journal(a.uid, b.uid, amount)
	}
	if err != nil {
		return err
	}
	if kind == "rollback" {
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		counts.rolledBack.Add(1)
		return nil
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	updated = []shapesAcct{a, b}
	counts.committed.Add(1)
	if kind == "key change" {
		counts.keyChanges.Add(1)
	} else {
		counts.transfers.Add(1)
	}
	return nil
}
