package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// failoverTables are the tables of the failover workload; failoverBig is the large table whose
// chunked copy is in progress when the primary dies.
var failoverTables = []string{"public.fa", "public.fb", "public.fc"}

const (
	failoverBig     = "public.big"
	failoverBigRows = 300_000
	// The copy reads 1,000-row chunks at 30,000 rows/s at most: about 10 s in all, so the
	// primary dies in the middle of it.
	failoverChunkRows = 1000
	failoverCopyRate  = 30_000
	// failoverMarkerID is the row written on the promoted server at once: the first change
	// from the new primary.
	failoverMarkerID = 900_000
)

// failoverCase is what TestFailoverSlot's subtests set up before the primary dies.
type failoverCase int

const (
	// failoverSlot: a failover slot, synced, and synchronized_standby_slots on the primary.
	failoverSlot failoverCase = iota
	// noFailoverSlot: the promoted standby has no slot.
	noFailoverSlot
	// kafkaPastPromotion: a failover slot, but the standby stopped receiving WAL (and
	// synchronized_standby_slots was reset) before the last changes, which cdc published: Kafka
	// holds changes the promoted server never had.
	kafkaPastPromotion
)

// TestFailoverSlot: on PostgreSQL 17 (make test-integration-pg17), a private primary and a
// streaming standby; cdc runs on a multi-host CDC_PG_URL with CDC_SLOT_FAILOVER=true under a
// three-table workload, and a large table is added and copied in chunks. The primary is stopped
// with -m immediate while changes are in flight and the copy is half done, and the standby
// promoted: cdc goes on from the synchronised slot on the promoted server. At the end every
// topic equals its table there, no change is published twice, no watermark moved backwards, no
// table was copied again and the copy in progress resumed where Kafka had it (each row's
// snapshot record at most once, the chunks done before the failure not read again). The time
// from the primary's death to the first change of the new primary in Kafka is logged. Without a
// failover slot the promoted server has no slot, and cdc stops with a message that says so; with
// a failover slot but a standby that did not receive what cdc published (Kafka past the
// promotion), cdc stops with a message that says so too. On an older server (the PostgreSQL 15
// suite) it checks that CDC_SLOT_FAILOVER=true is refused.
func TestFailoverSlot(t *testing.T) {
	// The PostgreSQL 17 run (CDC_TEST_PG_VERSION=17) needs no shared servers: each subtest
	// starts its own, and fails if they are not 17.
	if v, _ := strconv.Atoi(os.Getenv(testenv.EnvPGVersion)); v < 17 && testenv.PGMajor(t) < 17 {
		failoverRefused(t)
		return
	}
	t.Run("failover slot", func(t *testing.T) { runFailover(t, failoverSlot) })
	t.Run("no failover slot", func(t *testing.T) { runFailover(t, noFailoverSlot) })
	t.Run("kafka past the promotion", func(t *testing.T) { runFailover(t, kafkaPastPromotion) })
}

// failoverRefused: before PostgreSQL 17, CDC_SLOT_FAILOVER=true stops cdc with a clear message.
func failoverRefused(t *testing.T) {
	e := newEnv(t)
	e.exec(`CREATE TABLE fa (id int PRIMARY KEY, v int)`)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.fa"
	vars["CDC_SLOT_FAILOVER"] = "true"
	p := e.startCDC(vars)
	select {
	case <-p.done:
		p.done <- nil
	case <-time.After(2 * time.Minute):
		t.Fatalf("cdc still running 2m after start with CDC_SLOT_FAILOVER=true on PostgreSQL %d", testenv.PGMajor(t))
	}
	if code := p.cmd.ProcessState.ExitCode(); code == 0 {
		t.Errorf("exit code 0, want a failure")
	}
	if want := "CDC_SLOT_FAILOVER=true needs PostgreSQL 17 or later"; !strings.Contains(p.log.String(), want) {
		t.Errorf("cdc log lacks %q:\n%s", want, tail(p.log.String(), 3000))
	}
}

// pgPair is a private primary (testenv's) and a streaming standby made from it.
type pgPair struct {
	t                          testing.TB
	bin                        string // PostgreSQL's bin folder
	primaryData, standbyData   string
	primaryPort, standbyPort   int
	primaryURL, standbyURL, db string
	standbyOpts                string // the standby's server options
}

// asPostgres runs a PostgreSQL program as the postgres user (initdb's owner) when we are root.
func asPostgres(t testing.TB, name string, args ...string) string {
	t.Helper()
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	} else {
		cmd = exec.Command(name, args...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startPair creates database db on srv's PostgreSQL, runs setup there, and makes a standby of
// it with pg_basebackup (physical slot standby1, hot_standby_feedback on, the slot sync worker
// off: the test calls pg_sync_replication_slots() itself). synchronized_standby_slots names
// standby1 on the primary.
func startPair(t *testing.T, srv *testenv.Servers, db string, setup ...string) *pgPair {
	t.Helper()
	_, port, _ := net.SplitHostPort(srv.PGAddr())
	pp := &pgPair{t: t, db: db}
	pp.primaryPort, _ = strconv.Atoi(port)
	testenv.Exec(t, srv.PGURL(), "CREATE DATABASE "+db)
	pp.primaryURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pp.primaryPort, db)
	testenv.Exec(t, pp.primaryURL, setup...)

	ctx := t.Context()
	c, err := pgx.Connect(ctx, pp.primaryURL)
	if err != nil {
		t.Fatal(err)
	}
	var pidLine string
	if err := c.QueryRow(ctx, `SELECT current_setting('data_directory'), pg_read_file('postmaster.pid')`).Scan(&pp.primaryData, &pidLine); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	pid := strings.SplitN(pidLine, "\n", 2)[0]
	exe, err := os.Readlink("/proc/" + pid + "/exe")
	if err != nil {
		t.Fatalf("find the postgres binary: %v", err)
	}
	pp.bin = filepath.Dir(exe)

	ports, err := testsvc.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	pp.standbyPort = ports[0]
	pp.standbyURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pp.standbyPort, db)
	pp.standbyData = filepath.Join(srv.State(), "standby")
	if err := os.MkdirAll(pp.standbyData, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(pp.standbyData, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	asPostgres(t, filepath.Join(pp.bin, "pg_basebackup"), "-D", pp.standbyData, "-R", "-X", "stream", "-c", "fast", "-C", "-S", "standby1",
		"-d", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres", pp.primaryPort))
	pp.standbyOpts = fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s", pp.standbyPort, pp.standbyData) +
		" -c wal_level=logical -c max_replication_slots=40 -c max_wal_senders=40 -c fsync=off -c synchronous_commit=off" +
		" -c hot_standby_feedback=on" // sync_replication_slots: off by default, and not set here, so that ALTER SYSTEM can turn it on (setSyncWorker)
	pp.startStandby()
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(pp.bin, "pg_ctl"), "-D", pp.standbyData, "-m", "immediate", "-w", "stop")
		if os.Geteuid() == 0 {
			cmd = exec.Command("runuser", "-u", "postgres", "--", filepath.Join(pp.bin, "pg_ctl"), "-D", pp.standbyData, "-m", "immediate", "-w", "stop")
		}
		_ = cmd.Run()
	})
	testenv.Exec(t, pp.primaryURL, `ALTER SYSTEM SET synchronized_standby_slots = 'standby1'`, `SELECT pg_reload_conf()`)
	return pp
}

// startStandby starts the standby's server.
func (pp *pgPair) startStandby() {
	asPostgres(pp.t, filepath.Join(pp.bin, "pg_ctl"), "-D", pp.standbyData, "-l", filepath.Join(pp.standbyData, "standby.log"),
		"-w", "-t", "60", "-o", pp.standbyOpts, "start")
}

// multiHostURL names both servers; cdc connects to the one that accepts writes.
func (pp *pgPair) multiHostURL() string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=%s sslmode=disable target_session_attrs=read-write",
		pp.primaryPort, pp.standbyPort, pp.db)
}

// syncSlots runs until ctx ends: a running-transactions record on the primary, and a slot sync
// on the standby, every 200ms (what the sync worker does, without its back-off).
func (pp *pgPair) syncSlots(ctx context.Context) {
	connect := func(url string) *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil
		}
		return c
	}
	var primary, standby *pgx.Conn
	for ctx.Err() == nil {
		if primary == nil {
			primary = connect(pp.primaryURL)
		}
		if standby == nil {
			standby = connect(pp.standbyURL)
		}
		if primary != nil {
			if _, err := primary.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
				primary.Close(context.Background())
				primary = nil
			}
		}
		if standby != nil {
			if _, err := standby.Exec(ctx, `SELECT pg_sync_replication_slots()`); err != nil && ctx.Err() == nil {
				pp.t.Logf("pg_sync_replication_slots: %v", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, c := range []*pgx.Conn{primary, standby} {
		if c != nil {
			c.Close(context.Background())
		}
	}
}

// syncedSlot returns the standby's copy of slot: whether it exists and is synced.
func (pp *pgPair) syncedSlot(ctx context.Context, slot string) (bool, string) {
	c, err := pgx.Connect(ctx, pp.standbyURL)
	if err != nil {
		pp.t.Fatal(err)
	}
	defer c.Close(context.Background())
	var synced bool
	var confirmed *string
	err = c.QueryRow(ctx, `SELECT synced, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&synced, &confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, ""
	}
	if err != nil {
		pp.t.Fatal(err)
	}
	if confirmed == nil {
		return synced, ""
	}
	return synced, *confirmed
}

// failoverWorkload writes to the three tables until ctx ends or the server goes away; it
// returns the number of committed transactions.
func failoverWorkload(ctx context.Context, url string) int64 {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0
	}
	defer c.Close(context.Background())
	var n int64
	for i := 0; ctx.Err() == nil; i++ {
		tx, err := c.Begin(ctx)
		if err != nil {
			return n
		}
		for j, tbl := range []string{"fa", "fb", "fc"} {
			if _, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ($1, 0) ON CONFLICT (id) DO UPDATE SET v = %s.v + 1`, tbl, tbl), 2000+(i*3+j)%3000); err != nil {
				break
			}
			if i%5 == 0 {
				if _, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET v = v + 1 WHERE id = $1`, tbl), i%1000+1); err != nil {
					break
				}
			}
		}
		// The large table changes while it is copied: before, inside and after its chunks.
		if err == nil && i%2 == 0 {
			_, err = tx.Exec(ctx, `UPDATE big SET v = v + 1 WHERE id = $1`, (i*7919)%failoverBigRows+1)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			return n
		}
		n++
	}
	return n
}

func runFailover(t *testing.T, c failoverCase) {
	failover := c != noFailoverSlot
	srv := testenv.StartPrivate(t, testenv.PrivateOptions{})
	if major := srv.PGMajor(); major < 17 {
		t.Fatalf("the private server is PostgreSQL %d; failover slots need 17", major)
	}
	var setup []string
	for _, tbl := range []string{"fa", "fb", "fc"} {
		setup = append(setup, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL)`, tbl),
			fmt.Sprintf(`INSERT INTO %s SELECT g, 0 FROM generate_series(1, 1000) g`, tbl))
	}
	// The large table (the kafka-past-the-promotion case stops before it would copy it).
	if c != kafkaPastPromotion {
		setup = append(setup, `CREATE TABLE big (id int PRIMARY KEY, v int NOT NULL, pad text NOT NULL)`,
			fmt.Sprintf(`INSERT INTO big SELECT g, 0, md5(g::text) FROM generate_series(1, %d) g`, failoverBigRows))
	}
	begin := time.Now()
	pp := startPair(t, srv, "failover", setup...)
	t.Logf("primary :%d and standby :%d ready in %s", pp.primaryPort, pp.standbyPort, time.Since(begin).Round(time.Millisecond))

	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	e := &env{t: t, pgURL: pp.primaryURL, brokers: []string{srv.KafkaAddr()},
		prefix: "it" + suffix + ".failover", slot: "it_" + suffix, pub: "it_pub"}
	vars := e.baseVars()
	vars["CDC_PG_URL"] = pp.multiHostURL()
	vars["CDC_TABLES"] = strings.Join(failoverTables, ",")
	vars["CDC_SLOT_FAILOVER"] = strconv.FormatBool(failover)
	vars["CDC_CONNECT_TIMEOUT"] = "2s"
	vars["CDC_SNAPSHOT_STRATEGY"] = "chunked"
	vars["CDC_SNAPSHOT_CHUNK_ROWS"] = strconv.Itoa(failoverChunkRows)
	vars["CDC_SNAPSHOT_MAX_ROWS_PER_SECOND"] = strconv.Itoa(failoverCopyRate)
	if c == failoverSlot {
		// Set up as production would be: the standby's sync worker on from the start. cdc check
		// before the first start passes on this correct pair: the slot's absence is expected,
		// and it says what to wait for after the first start.
		setSyncWorker(t, pp.standbyURL, true)
		pre := runCDC(t, vars, time.Minute, "check")
		t.Logf("cdc check before the first start (exit %d):\n%s", pre.code, pre.out)
		if pre.code != 0 {
			t.Errorf("cdc check before the first start on a correctly set up pair: exit %d, want 0", pre.code)
		}
		assertContains(t, pre.out, "as expected before cdc's first start", "--wait-failover-ready")
	}
	rec := e.recordWatermarks()
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(t.Context()), failoverTables...)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	var committed atomic.Int64
	startWorkload := sync.OnceFunc(func() {
		wg.Add(1)
		go func() { defer wg.Done(); committed.Store(failoverWorkload(ctx, pp.primaryURL)) }()
	})
	if c == failoverSlot {
		// Under the workload the standby's copy starts temporary (its synchronisation held
		// back): cdc check must not pass it then. The promotion below is decided by cdc check
		// alone (--wait-failover-ready).
		startWorkload()
		checkWhileHeldBack(t, pp, e.slot, vars, time.Minute)
		w := runCDC(t, vars, 3*time.Minute, "check", "--wait-failover-ready=2m")
		t.Logf("cdc check --wait-failover-ready (exit %d):\n%s", w.code, w.out)
		if w.code != 0 {
			t.Fatalf("cdc check --wait-failover-ready: exit %d, want 0", w.code)
		}
		assertContains(t, w.out, fmt.Sprintf("replication slot %s is failover-ready", e.slot))
		if cp := pp.standbyCopy(t.Context(), e.slot); !cp.ready() {
			t.Errorf("cdc check said failover-ready, and the standby's copy is %+v", cp)
		}
	} else {
		wg.Add(1)
		go func() { defer wg.Done(); pp.syncSlots(ctx) }()
		syncByHand(t, e, pp, vars, failover)
	}
	if c == kafkaPastPromotion {
		cancel()
		wg.Wait()
		kafkaPast(t, e, pp, p)
		return
	}
	startWorkload()
	// The large table joins the publication (CDC_TABLES only ever adds to it): cdc copies it
	// in chunks while the workload runs.
	bigID, _ := change.ParseExportID(failoverBig)
	testenv.Exec(t, pp.primaryURL, `ALTER PUBLICATION it_pub ADD TABLE big`)
	copying := func(r watermark.Record) bool {
		return r.State == watermark.StateHydrating && r.Snapshot != nil && r.Snapshot.ChunksDone > 0
	}
	rec.first(t, 2*time.Minute, bigID, "a third of its chunks", func(r watermark.Record) bool {
		return copying(r) && r.Snapshot.ChunksDone >= failoverBigRows/failoverChunkRows/3
	})
	// The first change of the promoted server, read from where its topic ends now.
	first := e.followKey(e.topic("public.fa"), fmt.Sprintf(`{"id":%d}`, failoverMarkerID))

	// The primary dies with transactions in flight and the copy half done.
	killed := time.Now()
	asPostgres(t, filepath.Join(pp.bin, "pg_ctl"), "-D", pp.primaryData, "-m", "immediate", "-w", "stop")
	cancel()
	wg.Wait()
	before := e.latestWatermarks()[bigID]
	if !copying(before) || before.Snapshot.ChunksDone >= failoverBigRows/failoverChunkRows {
		t.Fatalf("big was not being copied when the primary died: %+v", before)
	}
	t.Logf("primary stopped (-m immediate) after %d workload transactions; big's copy had %d chunks (%d rows) in Kafka",
		committed.Load(), before.Snapshot.ChunksDone, before.Snapshot.RowsCopied)
	asPostgres(t, filepath.Join(pp.bin, "pg_ctl"), "-D", pp.standbyData, "-w", "-t", "60", "promote")
	promoted := time.Now()
	t.Logf("standby promoted in %s", promoted.Sub(killed).Round(time.Millisecond))
	e.pgURL = pp.standbyURL
	// cdc's log from here on: its lives after the promotion.
	logFrom := len(p.log.String())
	testenv.Exec(t, pp.standbyURL, fmt.Sprintf(`INSERT INTO fa VALUES (%d, 0)`, failoverMarkerID))

	if !failover {
		// The stream's reconnection finds another timeline, and the start-up check the slot
		// missing (or, had the stage reached it, its own check): either message names the case.
		stoppedWith(t, p, killed, "promotion of a standby without the slot",
			fmt.Sprintf("replication slot %q is missing (this server was promoted at", e.slot),
			fmt.Sprintf("replication slot %q does not exist (dropped, or this server is a promoted standby without a synchronised failover slot", e.slot))
		return
	}

	select {
	case at := <-first:
		t.Logf("first change from the new primary published %s after the primary died (%s after the promotion)",
			at.Sub(killed).Round(time.Millisecond), at.Sub(promoted).Round(time.Millisecond))
	case <-time.After(3 * time.Minute):
		t.Fatalf("the new primary's first change is not in Kafka 3m after the promotion:\n%s", tail(p.log.String(), 3000))
	}

	// cdc is killed at moments after the failover warning of its life on the promoted server,
	// while the new primary takes changes: every restart goes on without a copy.
	var logs []string
	p, logs = killAfterFailover(t, e, pp, vars, p, logFrom)

	// More changes on the new primary; cdc must publish them.
	post := testenv.Conn(t, pp.standbyURL)
	for _, tbl := range []string{"fa", "fb", "fc"} {
		if _, err := post.Exec(t.Context(), fmt.Sprintf(`UPDATE %s SET v = v + 100 WHERE id <= 10`, tbl)); err != nil {
			t.Fatal(err)
		}
		if _, err := post.Exec(t.Context(), fmt.Sprintf(`DELETE FROM %s WHERE id BETWEEN 11 AND 20`, tbl)); err != nil {
			t.Fatal(err)
		}
	}
	all := append([]string{failoverBig}, failoverTables...)
	e.waitFor(p, 3*time.Minute, e.currentLSN(t.Context()), all...)
	t.Logf("cdc published the new primary's changes, and big's copy, %s after the primary died", time.Since(killed).Round(time.Millisecond))
	// What cdc said about the failover (warnings and errors since the primary died), in all
	// its processes.
	logs = append(logs, p.log.String())
	allLogs := strings.Join(logs, "")
	var said []string
	for line := range strings.Lines(allLogs) {
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if ts, err := time.Parse(time.RFC3339Nano, stamp); err == nil && ts.After(killed) &&
			(strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "resumes")) {
			said = append(said, strings.TrimSpace(line))
		}
	}
	t.Logf("cdc's warnings and errors after the primary died:\n%s", strings.Join(said, "\n"))
	committedRows := 0
	for _, tbl := range all {
		name := strings.TrimPrefix(tbl, "public.")
		recs := e.readTopic(e.topic(tbl))
		assertSameState(t, name, materialize(t, recs), e.tableState(name, "id"))
		// No table was copied again: each key has at most one snapshot record. No change was
		// published twice (as checkNoDuplicates, on the records read once).
		copies := map[string]int{}
		changes := map[string]int64{}
		for _, r := range recs {
			env := decode(t, r)
			switch {
			case env == nil:
			case env.Op == "r":
				if copies[string(r.Key)]++; copies[string(r.Key)] == 2 {
					t.Errorf("%s: key %s copied twice", tbl, r.Key)
				}
			default:
				id := fmt.Sprintf("%s/%d/%d/%s", r.Key, env.Source.LSN, env.Source.Sequence, env.Op)
				if prev, ok := changes[id]; ok {
					t.Errorf("%s: change %s published twice (offsets %d and %d)", tbl, id, prev, r.Offset)
				}
				changes[id] = r.Offset
			}
		}
		if tbl == failoverBig {
			committedRows = len(copies)
		}
	}
	checkFailoverWatermarks(t, rec.all(), bigID, before)
	// The chunks in Kafka before the failure were not read again: only the chunks in flight
	// at the failure (at most one per worker) were produced twice, in aborted transactions.
	produced := 0
	e.scanTopic(e.topic(failoverBig), kgo.ReadUncommitted(), func(r *kgo.Record) {
		if bytes.Contains(r.Value, []byte(`"op":"r"`)) {
			produced++
		}
	})
	t.Logf("big: %d rows; snapshot records committed %d, produced %d", failoverBigRows, committedRows, produced)
	if slack := 4 * failoverChunkRows * len(logs); produced > failoverBigRows+slack {
		t.Errorf("big: %d snapshot records produced for %d rows (more than the %d of the chunks in flight): chunks were read again", produced, failoverBigRows, slack)
	}
	if n := strings.Count(allLogs, "chunked copy resumes"); n < 1 || n > len(logs) {
		t.Errorf("cdc logged %d resumes of the chunked copy in %d processes, want 1 to %d:\n%s", n, len(logs), len(logs), tail(allLogs, 3000))
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

// checkFailoverWatermarks: read in order, no export's watermark moved backwards, no export
// started a new copy attempt, and big's copy went on from the chunks it had in Kafka before the
// failure (before is its latest record then).
func checkFailoverWatermarks(t *testing.T, recs []watermark.Record, big change.ExportID, before watermark.Record) {
	t.Helper()
	last := map[change.ExportID]uint64{}
	chunks := 0
	resumed := false
	for _, r := range recs {
		if r.WatermarkLSN != nil {
			if prev := last[r.Export]; *r.WatermarkLSN < prev {
				t.Errorf("%s: watermark moved backwards from %s to %s", r.Export, change.LSN(prev), change.LSN(*r.WatermarkLSN))
			}
			last[r.Export] = max(last[r.Export], *r.WatermarkLSN)
		}
		if r.Snapshot != nil && r.Snapshot.Attempt != 1 {
			t.Errorf("%s: copy attempt %d: the table was copied again", r.Export, r.Snapshot.Attempt)
		}
		if r.Export != big || r.Snapshot == nil {
			continue
		}
		if r.Snapshot.ChunksDone < chunks {
			t.Errorf("big: chunks done went back from %d to %d", chunks, r.Snapshot.ChunksDone)
		}
		chunks = max(chunks, r.Snapshot.ChunksDone)
		if r.Time.After(before.Time) && r.Snapshot.ChunksDone > before.Snapshot.ChunksDone {
			resumed = true
		}
	}
	if len(last) != 4 {
		t.Errorf("watermarks of %d exports, want 4: %v", len(last), last)
	}
	if !resumed {
		t.Errorf("big's copy did not go on after the failure (last record before it: %d chunks)", before.Snapshot.ChunksDone)
	}
}

// followKey reports when a record with key appears in topic, read from its current end.
func (e *env) followKey(topic, key string) <-chan time.Time {
	e.t.Helper()
	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	for p, o := range e.endOffsets(topic) {
		offsets[topic][p] = kgo.NewOffset().At(o)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumePartitions(offsets),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done; cl.Close() })
	seen := make(chan time.Time, 1)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			found := false
			fs.EachRecord(func(r *kgo.Record) { found = found || string(r.Key) == key })
			if found {
				seen <- time.Now()
				return
			}
		}
	}()
	return seen
}

// stoppedWith waits for cdc to stop with an error after what, and checks that its log has one
// of wants (the text log escapes the quotes of an error).
func stoppedWith(t *testing.T, p *proc, killed time.Time, what string, wants ...string) {
	t.Helper()
	select {
	case <-p.done:
		p.done <- nil
	case <-time.After(2 * time.Minute):
		t.Fatalf("cdc still running 2m after the %s:\n%s", what, tail(p.log.String(), 3000))
	}
	if code := p.cmd.ProcessState.ExitCode(); code == 0 {
		t.Errorf("exit code 0 after the %s", what)
	}
	log := p.log.String()
	for _, want := range wants {
		i := strings.Index(log, want)
		if i < 0 {
			i = strings.Index(log, strings.ReplaceAll(want, `"`, `\"`))
		}
		if i >= 0 {
			line, _, _ := strings.Cut(log[i:], "\n")
			t.Logf("cdc stopped %s after the primary died: %s", time.Since(killed).Round(time.Millisecond), line)
			return
		}
	}
	t.Errorf("cdc log lacks any of %q:\n%s", wants, tail(log, 3000))
}

// kafkaPast: the standby stops receiving WAL (it is stopped, and synchronized_standby_slots no
// longer holds the stream back for it), cdc publishes changes it never gets, the primary dies
// and the standby is promoted. Its synchronised slot is behind what Kafka holds, and Kafka
// holds changes past the promotion: cdc must stop and say so, not skip the new primary's own
// changes as published ones.
func kafkaPast(t *testing.T, e *env, pp *pgPair, p *proc) {
	testenv.Exec(t, pp.primaryURL, `ALTER SYSTEM RESET synchronized_standby_slots`, `SELECT pg_reload_conf()`)
	asPostgres(t, filepath.Join(pp.bin, "pg_ctl"), "-D", pp.standbyData, "-m", "fast", "-w", "stop")
	for _, tbl := range []string{"fa", "fb", "fc"} {
		testenv.Exec(t, pp.primaryURL, fmt.Sprintf(`UPDATE %s SET v = v + 1000 WHERE id <= 100`, tbl))
	}
	at := e.currentLSN(t.Context())
	e.waitFor(p, 2*time.Minute, at, failoverTables...)
	t.Logf("cdc published up to %s, which the stopped standby never received", at)
	killed := time.Now()
	asPostgres(t, filepath.Join(pp.bin, "pg_ctl"), "-D", pp.primaryData, "-m", "immediate", "-w", "stop")
	pp.startStandby()
	asPostgres(t, filepath.Join(pp.bin, "pg_ctl"), "-D", pp.standbyData, "-w", "-t", "60", "promote")
	stoppedWith(t, p, killed, "promotion of a standby behind what Kafka holds",
		"failover: this server was promoted at", "Kafka's latest checkpoint was written on timeline 1: what Kafka holds past")
}

// setSyncWorker turns the standby's slot sync worker (sync_replication_slots) on or off.
func setSyncWorker(t *testing.T, standbyURL string, on bool) {
	t.Helper()
	conn := testenv.Conn(t, standbyURL)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), fmt.Sprintf(`ALTER SYSTEM SET sync_replication_slots = %t`, on)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	// The postmaster rereads the configuration after the call returns: wait until a new
	// session sees the value, as cdc check's will.
	want := map[bool]string{true: "on", false: "off"}[on]
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c := testenv.Conn(t, standbyURL)
		var got string
		err := c.QueryRow(t.Context(), `SELECT current_setting('sync_replication_slots')`).Scan(&got)
		c.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sync_replication_slots on the standby is %s 30s after the reload, want %s", got, want)
		}
	}
}

// syncByHand syncs the standby's copy of the slot with pg_sync_replication_slots() (syncSlots
// runs; the sync worker is off) and checks what cdc check says of the pair, as configured: with
// a failover slot it sees the copy failover-ready (sync_replication_slots is off there: the
// test syncs by hand, and check says so); without, it warns that a promotion loses the slot.
// The copy is created once the slot has moved past what the standby holds back; under a steady
// load each pg_sync_replication_slots() call starts over with a newer horizon, so the first
// sync happens before the workload (the notes' pitfall).
func syncByHand(t *testing.T, e *env, pp *pgPair, vars map[string]string, failover bool) {
	t.Helper()
	hydrated := e.currentLSN(t.Context())
	deadline := time.Now().Add(time.Minute)
	nudge := testenv.Conn(t, pp.primaryURL)
	nudges := 0
	for failover {
		synced, confirmed := pp.syncedSlot(t.Context(), e.slot)
		if at, err := change.ParseLSN(confirmed); synced && err == nil && at >= hydrated {
			t.Logf("standby's slot synced at %s", confirmed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby's copy of slot %s is not synced past %s after 1m (synced=%v, confirmed %q)", e.slot, hydrated, synced, confirmed)
		}
		// A change moves the slot forward once cdc confirms it; then no new transaction ids, so
		// that the slot's catalog xmin can reach the standby's (every write moves the latter).
		if nudges < 3 {
			if _, err := nudge.Exec(t.Context(), `UPDATE fa SET v = v + 1 WHERE id = 1`); err != nil {
				t.Fatal(err)
			}
			nudges++
		}
		time.Sleep(300 * time.Millisecond)
	}
	nudge.Close(context.Background())
	// cdc check on the pair, as configured: with a failover slot it sees the slot synced on
	// the standby (sync_replication_slots is off there: the test syncs by hand, and check says
	// so); without, it warns that a promotion loses the slot.
	chk := runCDC(t, vars, time.Minute, "check")
	t.Logf("cdc check (exit %d):\n%s", chk.code, chk.out)
	if failover {
		assertContains(t, chk.out, fmt.Sprintf("replication slot %s is a failover slot", e.slot),
			"synchronized_standby_slots names standby1: a standby", fmt.Sprintf("replication slot %s is failover-ready", e.slot),
			"hot_standby_feedback = on", "sync_replication_slots = off")
		if chk.code == 0 {
			t.Errorf("cdc check exit code 0 with sync_replication_slots off on the standby, want a failure")
		}
		// Set up as production would be: the standby's sync worker on. Check passes; then the
		// worker goes off again for the test's deterministic syncs (refused while it runs).
		setSyncWorker(t, pp.standbyURL, true)
		ok := runCDC(t, vars, time.Minute, "check")
		t.Logf("cdc check, sync_replication_slots = on on the standby (exit %d):\n%s", ok.code, ok.out)
		if ok.code != 0 {
			t.Errorf("cdc check exit code %d on a correctly set up pair, want 0", ok.code)
		}
		assertContains(t, ok.out, "sync_replication_slots = on", fmt.Sprintf("replication slot %s is failover-ready", e.slot))
		setSyncWorker(t, pp.standbyURL, false)
	} else {
		assertContains(t, chk.out, "1 physical standby(s) stream from this server, but the replication slot is not a failover slot")
	}
}

// failoverKills are the moments after its failover warning at which TestFailoverSlot kills cdc
// on the promoted server, one process after the other.
var failoverKills = []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, 700 * time.Millisecond,
	time.Second, 1500 * time.Millisecond, 2 * time.Second, 4 * time.Second}

// killAfterFailover SIGKILLs cdc at each of failoverKills after its life on the promoted
// server logs the failover warning (read in p's log from offset from), and starts it again each
// time; a life that logs none (its slot was confirmed past the promotion by then) is killed
// that long after "pipeline running". The workload goes on on the new primary meanwhile. A
// process that stops by itself fails the test: a restart must go on without a copy. It
// returns the last process, running, and the logs of the killed ones.
func killAfterFailover(t *testing.T, e *env, pp *pgPair, vars map[string]string, p *proc, from int) (*proc, []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var n atomic.Int64
	wg.Add(1)
	go func() { defer wg.Done(); n.Store(failoverWorkload(ctx, pp.standbyURL)) }()
	defer func() { cancel(); wg.Wait() }()
	var logs []string
	warned := 0
	for i, d := range failoverKills {
		at, line := lifeStarted(t, p, from)
		if strings.Contains(line, "failover:") {
			warned++
		}
		time.Sleep(time.Until(at.Add(d)))
		if done, _ := p.exited(); done {
			t.Fatalf("cdc stopped by itself before kill %d (%s after %q):\n%s", i+1, d, line, tail(p.log.String(), 4000))
		}
		p.stop(syscall.SIGKILL)
		t.Logf("kill %d: SIGKILL %s after %.80q", i+1, d, line)
		logs = append(logs, p.log.String())
		p = e.startCDC(vars)
		from = 0
	}
	at, line := lifeStarted(t, p, 0)
	t.Logf("cdc restarted after %d kills (%d of them keyed on a failover warning); the last start: %.80q at %s",
		len(failoverKills), warned, line, at.Format(time.TimeOnly))
	return p, logs
}

// lifeStarted waits until p's log (from offset from) shows the failover warning of a life, or
// "pipeline running" without one, and returns when it saw it and the line. A process that
// stops first fails the test with its log.
func lifeStarted(t *testing.T, p *proc, from int) (time.Time, string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		log := p.log.String()
		if from > len(log) {
			from = len(log)
		}
		log = log[from:]
		for _, want := range []string{"failover: this server was promoted", "pipeline running"} {
			if i := strings.Index(log, want); i >= 0 {
				line, _, _ := strings.Cut(log[i:], "\n")
				return time.Now(), line
			}
		}
		if done, _ := p.exited(); done {
			t.Fatalf("cdc stopped after a kill instead of going on (exit %d):\n%s", p.cmd.ProcessState.ExitCode(), tail(p.log.String(), 4000))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("cdc logged neither a failover warning nor \"pipeline running\" in 2m:\n%s", tail(p.log.String(), 3000))
	return time.Time{}, ""
}

// standbyCopyState is the standby's copy of a slot, as its pg_replication_slots says.
type standbyCopyState struct {
	Exists, Synced, Temporary bool
	Invalidation              *string
}

func (s standbyCopyState) ready() bool {
	return s.Exists && s.Synced && !s.Temporary && s.Invalidation == nil
}

// standbyCopy reads the standby's copy of slot.
func (pp *pgPair) standbyCopy(ctx context.Context, slot string) standbyCopyState {
	c, err := pgx.Connect(ctx, pp.standbyURL)
	if err != nil {
		pp.t.Fatal(err)
	}
	defer c.Close(context.Background())
	var s standbyCopyState
	err = c.QueryRow(ctx, `SELECT synced, temporary, invalidation_reason FROM pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&s.Synced, &s.Temporary, &s.Invalidation)
	if errors.Is(err, pgx.ErrNoRows) {
		return s
	}
	if err != nil {
		pp.t.Fatal(err)
	}
	s.Exists = true
	return s
}

// checkWhileHeldBack runs cdc check while the standby's copy of slot is temporary (its
// synchronisation held back, as under a workload after the first start) and asserts that check
// fails and says so: a promotion then would drop the slot. It gives up, logging it, when the
// copy becomes failover-ready before check ran on a temporary one.
func checkWhileHeldBack(t *testing.T, pp *pgPair, slot string, vars map[string]string, within time.Duration) {
	t.Helper()
	begin := time.Now()
	for time.Since(begin) < within {
		before := pp.standbyCopy(t.Context(), slot)
		switch {
		case before.ready():
			t.Logf("the standby's copy of slot %s was failover-ready %s after the first hydration, before cdc check saw it temporary", slot, time.Since(begin).Round(time.Millisecond))
			return
		case before.Exists && before.Temporary:
			chk := runCDC(t, vars, time.Minute, "check")
			if after := pp.standbyCopy(t.Context(), slot); !after.Temporary {
				continue // it changed while check ran: try again
			}
			t.Logf("cdc check while the standby's copy is temporary, %s after the first hydration (exit %d):\n%s", time.Since(begin).Round(time.Millisecond), chk.code, chk.out)
			if chk.code == 0 {
				t.Errorf("cdc check passed while the standby's copy of slot %s is temporary (a promotion would drop it)", slot)
			}
			assertContains(t, chk.out, fmt.Sprintf("replication slot %s is not failover-ready: temporary (synchronisation held back", slot))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the standby's copy of slot %s was never seen temporary within %s", slot, within)
}
