package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/watermark"
)

// TestChunkedHeldCommit: a transaction whose commit record is in the WAL, and streamed, while
// its xid is still in the proc array, changes a key that a later chunk reads. A wait for a
// synchronous standby that never comes holds it there (PostgreSQL writes and flushes the commit
// record, marks the xid committed, then waits, and only then takes the xid out of the proc
// array): the stream delivers it before the chunk's low marker, the chunk's snapshot does not
// see it, and the chunk reads the row from before it. The topic must still end with the
// transaction's version of the key. (It is the stale row a CI run of
// TestSnapshotStreamAndRestart found, made deterministic; that one was a commit preempted between
// its commit record and its proc-array removal.)
//
// The held transaction is the newest one, so it is not in the snapshots' running list
// (pg_snapshot_xip leaves out xids at or above xmax); were another transaction to complete
// after it, the chunker would wait for it, and the test would pass either way. It runs alone
// (not parallel) for that reason. About 10 s.
func TestChunkedHeldCommit(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const rows = 20_000
	e.exec(`CREATE TABLE big (id bigint PRIMARY KEY, k int NOT NULL, v text, n numeric(12,2)) WITH (autovacuum_enabled = false)`,
		fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, md5(g::text), g / 7.0 FROM generate_series(1, %d) g`, rows),
		`ANALYZE big`)
	admin := e.awaitMissingStandby()

	rec := e.recordWatermarks()
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.big"
	vars["CDC_SNAPSHOT_CHUNK_ROWS"] = "500"
	vars["CDC_SNAPSHOT_MAX_ROWS_PER_SECOND"] = "4000" // about 5 s: the last chunk is read while the update is held
	p := e.startCDC(vars)
	rec.first(t, 2*time.Minute, bigID, "a chunk done", func(r watermark.Record) bool {
		return r.State == watermark.StateHydrating && r.Snapshot != nil && r.Snapshot.ChunksDone > 0
	})

	release := holdCommit(t, e, admin, fmt.Sprintf("UPDATE big SET v = 'held' WHERE id = %d", rows))
	hydrated := func(r watermark.Record) bool { return r.State == watermark.StateHydrated }
	// A chunker that waits for the held transaction finishes only after it is let go.
	whileHeld := false
	for deadline := time.Now().Add(30 * time.Second); !whileHeld && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		whileHeld = slices.ContainsFunc(rec.all(), func(r watermark.Record) bool { return r.Export == bigID && hydrated(r) })
	}
	release()
	hyd := rec.first(t, 2*time.Minute, bigID, "hydrated", hydrated)
	left := containsLog(p, "chunk: keys left to the stream")
	t.Logf("copied while the update was held: %v; a chunk left keys to the stream: %v", whileHeld, left)
	if whileHeld && !left {
		t.Errorf("the last chunk was read while the update was held, and no chunk left its key to the stream")
	}
	if hyd.Snapshot != nil && hyd.Snapshot.ChunksDone < 2 {
		t.Fatalf("the copy took %d chunks, want the last read while the update was held", hyd.Snapshot.ChunksDone)
	}
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.big")
	e.assertTopicsEqualTables("public.big")
}

// TestChunkedHeldCommitAtStart: a transaction committed, and streamed, before a table's chunked
// copy starts, and still in the proc array when the copy's first chunk takes its snapshot (a wait
// for a synchronous standby that never comes holds it there). The stream delivered its change
// before the export was routed, so nothing published it; the chunk's snapshot does not see it,
// so the chunk holds the row from before it. The topic must still end with the transaction's
// version of the key. The update is big's first change after the table joined the publication:
// its Relation message wakes the poll that starts the copy (the poll interval is long). About
// 10 s.
func TestChunkedHeldCommitAtStart(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const rows = 2_000
	e.exec(`CREATE TABLE small (id int PRIMARY KEY, v text)`, `INSERT INTO small VALUES (1, 'a')`,
		`CREATE TABLE big (id bigint PRIMARY KEY, k int NOT NULL, v text, n numeric(12,2)) WITH (autovacuum_enabled = false)`,
		fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, md5(g::text), g / 7.0 FROM generate_series(1, %d) g`, rows),
		`CREATE PUBLICATION it_pub FOR TABLE small`)
	admin := e.awaitMissingStandby()
	rec := e.recordWatermarks()
	vars := e.baseVars()
	vars["CDC_SNAPSHOT_STRATEGY"] = "chunked"
	vars["CDC_SNAPSHOT_CHUNK_ROWS"] = "500"
	vars["CDC_PUBLICATION_POLL_INTERVAL"] = "10m"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small")

	e.exec(`ALTER PUBLICATION it_pub ADD TABLE big`)
	release := holdCommit(t, e, admin, "UPDATE big SET v = 'held' WHERE id = 1")
	defer release()
	hydrated := func(r watermark.Record) bool { return r.Export == bigID && r.State == watermark.StateHydrated }
	// Until the copy is done, or a chunk waits for the held transaction.
	started, whileHeld, waited := false, false, false
	for deadline := time.Now().Add(20 * time.Second); !whileHeld && !waited && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		started = started || containsLog(p, "chunked copy started")
		whileHeld = slices.ContainsFunc(rec.all(), hydrated)
		waited = containsLog(p, "chunk waits for transactions")
	}
	if !started {
		t.Fatal("big's chunked copy did not start while the update was held")
	}
	release()
	rec.first(t, 2*time.Minute, bigID, "hydrated", func(r watermark.Record) bool { return r.State == watermark.StateHydrated })
	t.Logf("copy started while the update was held; hydrated while held: %v; a chunk waited for it: %v", whileHeld, waited)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small", "public.big")
	e.assertTopicsEqualTables("public.big")
}

// holdCommit runs sql in a session that waits for a synchronous standby after its commit
// record, until it says so (pg_stat_activity), and returns the function that lets it go.
func holdCommit(t *testing.T, e *env, admin *pgx.Conn, sql string) (release func()) {
	t.Helper()
	held := e.conn()
	var pid int32
	if err := held.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := held.Exec(t.Context(), "SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := held.Exec(context.Background(), sql)
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var xid *string
		// Nothing here takes an xid: the held transaction stays the newest one.
		err := admin.QueryRow(t.Context(), `SELECT backend_xid::text FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'`, pid).Scan(&xid)
		if err == nil && xid != nil {
			t.Logf("xid %s committed, held in the proc array", *xid)
			break
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the held update never waited for synchronous replication")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var once bool
	return func() {
		if once {
			return
		}
		once = true
		if _, err := admin.Exec(context.Background(), "SELECT pg_cancel_backend($1)", pid); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Errorf("held update: %v", err)
		}
	}
}

// awaitMissingStandby names a synchronous standby that never comes until the test ends, so that
// a session with synchronous_commit on waits after its commit record with its xid still in the
// proc array (sessions of the server's default, synchronous_commit off, do not wait). It returns
// the connection it used.
func (e *env) awaitMissingStandby() *pgx.Conn {
	e.t.Helper()
	admin := e.conn()
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = 'tidemark_never'", "SELECT pg_reload_conf()"} {
		if _, err := admin.Exec(e.t.Context(), q); err != nil {
			e.t.Fatal(err)
		}
	}
	e.t.Cleanup(func() {
		for _, q := range []string{"ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()"} {
			if _, err := admin.Exec(context.Background(), q); err != nil {
				e.t.Error(err)
			}
		}
	})
	// pg_reload_conf only signals the postmaster: a session forked before it re-read the
	// configuration keeps the old one. Wait until a new session sees the standby.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c := e.conn()
		var names string
		err := c.QueryRow(e.t.Context(), "SHOW synchronous_standby_names").Scan(&names)
		c.Close(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		if names == "tidemark_never" {
			return admin
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("new sessions still see synchronous_standby_names %q 30s after pg_reload_conf", names)
		}
	}
}
