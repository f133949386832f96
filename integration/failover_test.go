package integration

import (
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

	"github.com/tidemark/cdc/integration/testenv"
	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
)

// failoverTables are the tables of the failover workload.
var failoverTables = []string{"public.fa", "public.fb", "public.fc"}

// TestFailoverSlot: on PostgreSQL 17 (make test-integration-pg17), a private primary and a
// streaming standby; cdc runs on a multi-host CDC_PG_URL with CDC_SLOT_FAILOVER=true under a
// three-table workload. The primary is stopped with -m immediate while changes are in flight and
// the standby promoted: cdc goes on from the synchronised slot on the promoted server, every
// topic equals its table there and no change is published twice. Without a failover slot the
// promoted server has no slot, and cdc stops with a message that says so. On an older server
// (the PostgreSQL 15 suite) it checks that CDC_SLOT_FAILOVER=true is refused.
func TestFailoverSlot(t *testing.T) {
	// The PostgreSQL 17 run (CDC_TEST_PG_VERSION=17) needs no shared servers: each subtest
	// starts its own, and fails if they are not 17.
	if v, _ := strconv.Atoi(os.Getenv(testenv.EnvPGVersion)); v < 17 && testenv.PGMajor(t) < 17 {
		failoverRefused(t)
		return
	}
	t.Run("failover slot", func(t *testing.T) { runFailover(t, true) })
	t.Run("no failover slot", func(t *testing.T) { runFailover(t, false) })
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
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s", pp.standbyPort, pp.standbyData) +
		" -c wal_level=logical -c max_replication_slots=20 -c max_wal_senders=20 -c fsync=off -c synchronous_commit=off" +
		" -c hot_standby_feedback=on -c sync_replication_slots=off"
	asPostgres(t, filepath.Join(pp.bin, "pg_ctl"), "-D", pp.standbyData, "-l", filepath.Join(pp.standbyData, "standby.log"),
		"-w", "-t", "60", "-o", opts, "start")
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

func runFailover(t *testing.T, failover bool) {
	srv := testenv.StartPrivate(t, testenv.PrivateOptions{})
	if major := srv.PGMajor(); major < 17 {
		t.Fatalf("the private server is PostgreSQL %d; failover slots need 17", major)
	}
	var setup []string
	for _, tbl := range []string{"fa", "fb", "fc"} {
		setup = append(setup, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL)`, tbl),
			fmt.Sprintf(`INSERT INTO %s SELECT g, 0 FROM generate_series(1, 1000) g`, tbl))
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
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(t.Context()), failoverTables...)

	// The standby's copy of the slot is created once the slot has moved past what the standby
	// holds back; under a steady load each pg_sync_replication_slots() call starts over with a
	// newer horizon, so the first sync happens before the workload (the notes' pitfall).
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); pp.syncSlots(ctx) }()
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
			"synchronized_standby_slots names standby1: a standby", fmt.Sprintf("replication slot %s is synced", e.slot),
			"hot_standby_feedback = on", "sync_replication_slots = off")
	} else {
		assertContains(t, chk.out, "1 physical standby(s) stream from this server, but the replication slot is not a failover slot")
	}
	var committed atomic.Int64
	wg.Add(1)
	go func() { defer wg.Done(); committed.Store(failoverWorkload(ctx, pp.primaryURL)) }()
	time.Sleep(2 * time.Second)

	// The primary dies with transactions in flight.
	killed := time.Now()
	asPostgres(t, filepath.Join(pp.bin, "pg_ctl"), "-D", pp.primaryData, "-m", "immediate", "-w", "stop")
	cancel()
	wg.Wait()
	t.Logf("primary stopped (-m immediate) after %d workload transactions", committed.Load())
	asPostgres(t, filepath.Join(pp.bin, "pg_ctl"), "-D", pp.standbyData, "-w", "-t", "60", "promote")
	promoted := time.Now()
	t.Logf("standby promoted in %s", promoted.Sub(killed).Round(time.Millisecond))
	e.pgURL = pp.standbyURL

	if !failover {
		select {
		case <-p.done:
			p.done <- nil
		case <-time.After(2 * time.Minute):
			t.Fatalf("cdc still running 2m after the promotion of a standby without its slot:\n%s", tail(p.log.String(), 3000))
		}
		// The stream's reconnection finds the slot missing (or, on a new start, the start-up
		// check does): either message names the case and the fix.
		wants := []string{
			fmt.Sprintf("replication slot %q does not exist (dropped, or this server is a promoted standby without a synchronised failover slot", e.slot),
			fmt.Sprintf("replication slot %q is missing but 3 exports were hydrated from it", e.slot),
		}
		if code := p.cmd.ProcessState.ExitCode(); code == 0 {
			t.Errorf("exit code 0 after the promotion of a standby without the slot")
		}
		log := p.log.String()
		found := false
		for _, want := range wants {
			// The text log quotes the error, escaping its quotes.
			i := strings.Index(log, want)
			if j := strings.Index(log, strings.ReplaceAll(want, `"`, `\"`)); i < 0 {
				i = j
			}
			if i >= 0 {
				found = true
				line := log[i:]
				if j := strings.IndexByte(line, '\n'); j >= 0 {
					line = line[:j]
				}
				t.Logf("cdc stopped %s after the primary died: %s", time.Since(killed).Round(time.Millisecond), line)
			}
		}
		if !found {
			t.Errorf("cdc log lacks any of %q:\n%s", wants, tail(log, 3000))
		}
		return
	}

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
	e.waitFor(p, 3*time.Minute, e.currentLSN(t.Context()), failoverTables...)
	t.Logf("cdc published the new primary's changes %s after the primary died", time.Since(killed).Round(time.Millisecond))
	for _, tbl := range failoverTables {
		name := strings.TrimPrefix(tbl, "public.")
		recs := e.readTopic(e.topic(tbl))
		assertSameState(t, name, materialize(t, recs), e.tableState(name, "id"))
	}
	e.checkNoDuplicates(failoverTables...)
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}
