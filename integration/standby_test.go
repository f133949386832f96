package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// TestStandbyCapture: on PostgreSQL 17 (make test-integration-pg17), a private primary and a
// streaming standby; cdc's CDC_PG_URL names the standby. A three-table workload (inserts,
// updates, deletes, key changes) runs on the primary while a 200,000-row table is copied, with
// a connection to the primary for the chunked copies' markers (CDC_PG_PRIMARY_URL) and without
// one (the copy strategy). At the end every topic equals its table on the primary, no change is
// published twice, the slot lives on the standby and the primary holds no logical slot; while
// the published tables are idle and the primary writes elsewhere, their watermarks and the
// standby's slot still advance. Before PostgreSQL 16 (the PostgreSQL 15 suite) it is skipped:
// cdc's refusal of an older standby is checked by pipeline.TestStandbyVersionGate.
func TestStandbyCapture(t *testing.T) {
	// The PostgreSQL 17 run (CDC_TEST_PG_VERSION=17) needs no shared servers: each subtest
	// starts its own, and fails if they are not 17.
	if v, _ := strconv.Atoi(os.Getenv(testenv.EnvPGVersion)); v < 17 && testenv.PGMajor(t) < 16 {
		// A PostgreSQL 15 standby cannot decode; cdc refuses it at start and in cdc check
		// (pipeline.TestStandbyVersionGate checks the message). The pair of servers this test
		// starts is set up for 17.
		t.Skipf("capture from a standby needs PostgreSQL 16+; the server is %d", testenv.PGMajor(t))
	}
	t.Run("primary connection", func(t *testing.T) { runStandbyCapture(t, true) })
	t.Run("no primary connection", func(t *testing.T) { runStandbyCapture(t, false) })
}

// standbyTables are the tables of the workload (createTables, startWriter).
var standbyTables = allTables

func runStandbyCapture(t *testing.T, withPrimary bool) {
	srv := testenv.StartPrivate(t, testenv.PrivateOptions{})
	if major := srv.PGMajor(); major < 17 {
		t.Fatalf("the private server is PostgreSQL %d; this test runs on 17", major)
	}
	begin := time.Now()
	pp := startPair(t, srv, "standby")
	t.Logf("primary :%d and standby :%d ready in %s", pp.primaryPort, pp.standbyPort, time.Since(begin).Round(time.Millisecond))

	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	// e's connection is the primary's: the workload writes there, and the tables are read
	// there at the end.
	e := &env{t: t, pgURL: pp.primaryURL, brokers: []string{srv.KafkaAddr()},
		prefix: "it" + suffix + ".standby", slot: "it_" + suffix, pub: "it_pub"}
	ctx := t.Context()
	const bigRows = 200_000
	e.createTables(bigRows)
	// An unpublished table: the primary's writes while the published tables are idle.
	e.exec(`CREATE TABLE elsewhere (id bigserial PRIMARY KEY, v int)`)
	vars := e.baseVars()
	vars["CDC_PG_URL"] = pp.standbyURL
	vars["CDC_TABLES"] = strings.Join(standbyTables, ",")
	vars["CDC_SNAPSHOT_WORKERS"] = "4"
	standby := testenv.Conn(t, pp.standbyURL)
	// What cdc check reads on the standby must be there.
	replayed := func() {
		t.Helper()
		if err := pgcat.WaitReplayed(ctx, standby, e.currentLSN(ctx)); err != nil {
			t.Fatal(err)
		}
	}
	if withPrimary {
		// cdc adds the tables to the publication through the primary.
		vars["CDC_PG_PRIMARY_URL"] = pp.primaryURL
		// Misconfigured: the "primary" is the standby itself.
		bad := maps.Clone(vars)
		bad["CDC_PG_PRIMARY_URL"] = pp.standbyURL
		replayed()
		chk := runCDC(t, bad, time.Minute, "check")
		t.Logf("cdc check, CDC_PG_PRIMARY_URL naming the standby (exit %d):\n%s", chk.code, chk.out)
		if chk.code == 0 {
			t.Errorf("cdc check exit code 0 with CDC_PG_PRIMARY_URL naming the standby, want a failure")
		}
		assertContains(t, chk.out, "✗ CDC_PG_PRIMARY_URL names a server in recovery (a standby): it cannot write")
	} else {
		// Misconfigured: a failover slot, and a publication the standby cannot make.
		bad := maps.Clone(vars)
		bad["CDC_SLOT_FAILOVER"] = "true"
		replayed()
		chk := runCDC(t, bad, time.Minute, "check")
		t.Logf("cdc check, CDC_SLOT_FAILOVER=true and no publication (exit %d):\n%s", chk.code, chk.out)
		if chk.code == 0 {
			t.Errorf("cdc check exit code 0 on a misconfigured standby, want a failure")
		}
		assertContains(t, chk.out, "✗ CDC_SLOT_FAILOVER=true, but a failover slot lives on the primary",
			fmt.Sprintf("✗ publication %s lacks 3 table(s) of CDC_TABLES, and a standby cannot change it", e.pub))
		// The standby cannot create the publication: it is made on the primary beforehand.
		e.exec(fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s`, e.pub, strings.Join(standbyTables, ", ")))
		// A slot on a standby is ready once the standby replays a running-transactions record.
		// A busy primary's background writer logs one every 15 s; a test primary writes so
		// little that cdc waited 38-47 s per slot. Stand in for a busy primary: log one every
		// second (what CDC_PG_PRIMARY_URL makes cdc do itself).
		go standbySnapshots(ctx, testenv.Conn(t, pp.primaryURL))
	}
	replayed()

	// cdc check explains the pair as configured.
	chk := runCDC(t, vars, time.Minute, "check")
	t.Logf("cdc check (exit %d):\n%s", chk.code, chk.out)
	if chk.code != 0 {
		t.Errorf("cdc check exit code %d, want 0", chk.code)
	}
	assertContains(t, chk.out, "PostgreSQL is a hot standby", "hot_standby_feedback = on on the standby", "primary_slot_name = standby1 on the standby")
	if withPrimary {
		assertContains(t, chk.out, "CDC_PG_PRIMARY_URL connects to the standby's primary", "wal_level = logical on the primary",
			"the standby streams from physical slot standby1 on the primary")
	} else {
		assertContains(t, chk.out, "CDC_PG_PRIMARY_URL is not set: nothing is written on the primary; tables are copied with the copy strategy")
	}

	p := e.startCDC(vars)
	w := e.startWriter(ctx, bigRows)
	// Writes during the copy: every table gets its first watermark.
	copyStart := time.Now()
	e.waitFor(p, 5*time.Minute, 1, standbyTables...)
	t.Logf("tables copied from the standby in %s while %d workload transactions ran", time.Since(copyStart).Round(100*time.Millisecond), w.txns.Load())
	time.Sleep(time.Second)
	n := w.finish(t)
	lsn := e.currentLSN(ctx)
	e.waitFor(p, 3*time.Minute, lsn, standbyTables...)
	t.Logf("%d workload transactions published, up to %s", n, lsn)

	log := p.log.String()
	copyLine := "tables are copied with the copy strategy: CDC_PG_URL names a standby"
	strategy := map[bool]string{true: "snapshot_strategy=chunked", false: "snapshot_strategy=copy"}[withPrimary]
	if !strings.Contains(log, strategy) {
		t.Errorf("cdc log lacks %q", strategy)
	}
	if withPrimary {
		if strings.Contains(log, copyLine) {
			t.Errorf("with CDC_PG_PRIMARY_URL, cdc fell back to the copy strategy")
		}
		if !strings.Contains(log, "CDC_PG_URL names a hot standby: the slot, the stream and the copies are there; the chunked copies' markers") {
			t.Errorf("cdc log does not say that it captures from a standby with a primary connection")
		}
	} else if !strings.Contains(log, copyLine) {
		t.Errorf("cdc log lacks %q", copyLine)
	}

	// Idle: the published tables take no writes while the primary writes elsewhere. Their
	// watermarks and the standby's slot follow the replayed WAL.
	before := e.slotConfirmed(ctx, standby)
	other := testenv.Conn(t, pp.primaryURL)
	for range 20 {
		if _, err := other.Exec(ctx, `INSERT INTO elsewhere (v) SELECT g FROM generate_series(1, 100) g`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	idle := e.currentLSN(ctx)
	recs := e.waitFor(p, 2*time.Minute, idle, standbyTables...)
	for id, r := range recs {
		t.Logf("idle: %s watermark %s (the last published change was below %s)", id, r.Watermark, lsn)
	}
	deadline := time.Now().Add(time.Minute)
	for e.slotConfirmed(ctx, standby) < idle {
		if time.Now().After(deadline) {
			t.Fatalf("the standby's slot is confirmed at %s 1m after the idle writes, want >= %s (it was %s before)", e.slotConfirmed(ctx, standby), idle, before)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("idle: the standby's slot moved from %s to %s", before, e.slotConfirmed(ctx, standby))

	e.assertTopicsEqualTables(standbyTables...)
	e.checkNoDuplicates(standbyTables...)
	e.checkSnapshotReadsOnce(standbyTables...)

	// The slot is the standby's; the primary holds none.
	var primarySlots []string
	rows, err := other.Query(ctx, `SELECT slot_name || ' (' || slot_type || ')' FROM pg_replication_slots WHERE slot_type = 'logical'`)
	if err != nil {
		t.Fatal(err)
	}
	if primarySlots, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(primarySlots) > 0 {
		t.Errorf("the primary holds logical slots %v, want none", primarySlots)
	}
	var kind string
	if err := standby.QueryRow(ctx, `SELECT slot_type FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&kind); err != nil {
		t.Errorf("the standby holds no slot %s: %v", e.slot, err)
	} else if kind != "logical" {
		t.Errorf("the standby's slot %s is %s, want logical", e.slot, kind)
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

// standbySnapshots calls pg_log_standby_snapshot() on the primary every second until ctx ends.
func standbySnapshots(ctx context.Context, primary *pgx.Conn) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if _, err := primary.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil && ctx.Err() == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkSnapshotReadsOnce fails when a key's copy (op r) is published more than once in a
// committed transaction: each row is read once, by one chunk or one snapshot.
func (e *env) checkSnapshotReadsOnce(tables ...string) {
	e.t.Helper()
	for _, tbl := range tables {
		seen := map[string]int64{}
		reads := 0
		for _, r := range e.readTopic(e.topic(tbl)) {
			env := decode(e.t, r)
			if env == nil || !env.Source.Snapshot {
				continue
			}
			reads++
			if prev, ok := seen[string(r.Key)]; ok {
				e.t.Errorf("%s: key %s copied twice (offsets %d and %d)", tbl, r.Key, prev, r.Offset)
			}
			seen[string(r.Key)] = r.Offset
		}
		if reads == 0 {
			e.t.Errorf("%s: no copied rows in the topic", tbl)
		}
	}
}
