package snapshot

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// chunkRecorder stands in for the replication stage: it keeps every chunk handed over and
// releases its slot at once.
type chunkRecorder struct {
	mu     sync.Mutex
	units  map[change.ExportID][]*change.Unit
	total  map[change.ExportID]int
	failed map[change.ExportID]error
	left   int
	done   chan struct{}
	// streamed: what Streamed answers (the transactions the stream delivered).
	streamed []uint32
}

func (r *chunkRecorder) Streamed(_ context.Context, from uint32) ([]uint32, error) {
	var out []uint32
	for _, x := range r.streamed {
		if int32(x-from) >= 0 {
			out = append(out, x)
		}
	}
	return out, nil
}

func newChunkRecorder(jobs int) *chunkRecorder {
	return &chunkRecorder{units: map[change.ExportID][]*change.Unit{}, total: map[change.ExportID]int{},
		failed: map[change.ExportID]error{}, left: jobs, done: make(chan struct{})}
}

func (r *chunkRecorder) OpenWindow(uint64, change.ExportID, int) {}
func (r *chunkRecorder) AbandonWindow(uint64)                    {}

func (r *chunkRecorder) ChunkRead(_ uint64, u *change.Unit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.units[u.Export] = append(r.units[u.Export], u)
	u.Claim.Return()
}

func (r *chunkRecorder) CopyComplete(e change.ExportID, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total[e] = total
	r.finishOne()
}

func (r *chunkRecorder) Failed(e change.ExportID, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed[e] = err
	r.finishOne()
}

func (r *chunkRecorder) finishOne() {
	if r.left--; r.left == 0 {
		close(r.done)
	}
}

// runChunker copies jobs with a new Chunker and returns each export's chunks in order.
func runChunker(tb testing.TB, cfg Config, jobs ...ChunkJob) map[change.ExportID][]*change.Unit {
	tb.Helper()
	return runChunkerWith(tb, cfg, newChunkRecorder(len(jobs)), jobs...)
}

// runChunkerWith is runChunker with the recorder rec (made for len(jobs) jobs).
func runChunkerWith(tb testing.TB, cfg Config, rec *chunkRecorder, jobs ...ChunkJob) map[change.ExportID][]*change.Unit {
	tb.Helper()
	c, err := NewChunker(cfg, "chunktest", rec)
	if err != nil {
		tb.Fatalf("NewChunker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = c.Run(ctx)
	}()
	for _, j := range jobs {
		c.Add(j)
	}
	select {
	case <-rec.done:
	case <-time.After(5 * time.Minute):
		tb.Errorf("chunked copy did not complete in 5 minutes")
	}
	cancel()
	<-ran
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for e, err := range rec.failed {
		tb.Fatalf("copy of %s failed: %v", e, err)
	}
	for e, us := range rec.units {
		slices.SortFunc(us, func(a, b *change.Unit) int { return a.Chunk.Seq - b.Chunk.Seq })
		if len(us) != rec.total[e] {
			tb.Fatalf("%s: %d chunks handed over, CopyComplete said %d", e, len(us), rec.total[e])
		}
	}
	return rec.units
}

// TestChunkerReadsEachKeyOnce copies two tables in chunks of 100 rows, each chunk ending where
// its own read ended: the chunks' ranges follow each other without a gap, each chunk but the
// last holds exactly 100 rows, every key is read once, and a copy resumed after a chunk's end
// reads exactly the keys of the chunks after it. The key is composite, and its text holds the
// characters COPY escapes (the chunk's end is read from the COPY stream).
func TestChunkerReadsEachKeyOnce(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	q := func(table string) string { return pgcat.Ident(schema) + "." + pgcat.Ident(table) }
	texts := []string{"tab\there", "new\nline", `back\slash`, `\N`, "ünïcödé ✓", "", "cr\rlf", "quote ' and \" both"}
	tables := map[string]int{"Chunk Këys": 2345, "even": 300} // 300: the last chunk reads nothing
	for name, rows := range tables {
		execTest(t, conn, "CREATE TABLE "+q(name)+` (a text, b int, v text, PRIMARY KEY (a, b))`)
		execTest(t, conn, "INSERT INTO "+q(name)+` SELECT ($1::text[])[1 + g % $2], g, 'row ' || g FROM generate_series(1, $3) g`,
			texts, len(texts), rows)
		execTest(t, conn, "ANALYZE "+q(name))
	}
	cfg := Config{ConnString: url, Workers: 3, ChunkRows: 100, Codec: codec.Config{TopicPrefix: "tp"}, Logger: testLogger(t)}
	var jobs []ChunkJob
	for name := range tables {
		jobs = append(jobs, ChunkJob{Export: change.ExportID{Schema: schema, Table: name}, Attempt: 1})
	}
	got := runChunker(t, cfg, jobs...)

	for name, rows := range tables {
		e := change.ExportID{Schema: schema, Table: name}
		units := got[e]
		keys := checkChunks(t, e, units, nil, cfg.ChunkRows)
		if len(keys) != rows {
			t.Errorf("%s: %d keys read, the table has %d", e, len(keys), rows)
		}
		if want := rows/cfg.ChunkRows + 1; len(units) != want {
			t.Errorf("%s: %d chunks, want %d", e, len(units), want)
		}

		// Resume after the end of a chunk in the middle, as after a restart.
		k := len(units) / 2
		after := units[k].Chunk.Range.To
		resumed := runChunker(t, cfg, ChunkJob{Export: e, Attempt: 1, ResumeAfter: after})[e]
		rest := checkChunks(t, e, resumed, after, cfg.ChunkRows)
		want := map[string]bool{}
		for _, u := range units[k+1:] {
			for _, r := range u.Records {
				want[string(r.Key)] = true
			}
		}
		t.Logf("%s: %d keys in %d chunks; resumed after chunk %d: %d keys in %d chunks", e, len(keys), len(units), k, len(rest), len(resumed))
		if len(rest) != len(want) {
			t.Errorf("%s resumed after chunk %d (%q): %d keys read, want the %d keys of the chunks after it", e, k, after, len(rest), len(want))
		}
		for key := range rest {
			if !want[key] {
				t.Errorf("%s resumed after chunk %d: key %s was read, it belongs to a chunk before", e, k, key)
				break
			}
		}
	}
}

// checkChunks checks that units, one copy's chunks in order, start after from, follow each
// other, end at the table's end, and read each key once; it returns the keys read.
func checkChunks(t *testing.T, e change.ExportID, units []*change.Unit, from []string, chunkRows int) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	prev := from
	for i, u := range units {
		c := u.Chunk
		if c.Seq != i {
			t.Fatalf("%s: chunk %d has seq %d", e, i, c.Seq)
		}
		if !slices.Equal(c.Range.From, prev) {
			t.Errorf("%s: chunk %d starts after %q, the chunk before ended at %q", e, i, c.Range.From, prev)
		}
		last := i == len(units)-1
		if c.Last() != last {
			t.Errorf("%s: chunk %d of %d: Last() = %v", e, i, len(units), c.Last())
		}
		if !last && c.Read != chunkRows {
			t.Errorf("%s: chunk %d read %d rows, want %d", e, i, c.Read, chunkRows)
		}
		if last && c.Read >= chunkRows {
			t.Errorf("%s: the last chunk read %d rows, want fewer than %d", e, c.Read, chunkRows)
		}
		if len(u.Records) != c.Read {
			t.Errorf("%s: chunk %d has %d records for %d rows read", e, i, len(u.Records), c.Read)
		}
		for _, r := range u.Records {
			if keys[string(r.Key)] {
				t.Errorf("%s: key %s read twice", e, r.Key)
			}
			keys[string(r.Key)] = true
		}
		prev = c.Range.To
	}
	if len(units) == 0 {
		t.Errorf("%s: no chunks", e)
	}
	return keys
}

// TestChunkCarriesSnapshot: a chunk names the transactions its snapshot saw. A transaction that
// committed before the copy is seen; one that holds an xid and is still open while the chunk
// is read is not (it is a long-running one for the chunker, which stops waiting for it after
// a second).
func TestChunkCarriesSnapshot(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	tbl := pgcat.Ident(schema) + ".snap"
	execTest(t, conn, "CREATE TABLE "+tbl+" (id int PRIMARY KEY, v text)")
	var committed int64
	if err := conn.QueryRow(t.Context(), "INSERT INTO "+tbl+" VALUES (1, 'a') RETURNING pg_current_xact_id()::text::int8").Scan(&committed); err != nil {
		t.Fatal(err)
	}
	open := connectTest(t, url)
	execTest(t, open, "BEGIN")
	var running int64
	if err := open.QueryRow(t.Context(), "INSERT INTO "+tbl+" VALUES (2, 'b') RETURNING pg_current_xact_id()::text::int8").Scan(&running); err != nil {
		t.Fatal(err)
	}
	defer execTest(t, open, "ROLLBACK")

	e := change.ExportID{Schema: schema, Table: "snap"}
	cfg := Config{ConnString: url, Workers: 1, Codec: codec.Config{TopicPrefix: "tp"}, Logger: testLogger(t)}
	units := runChunker(t, cfg, ChunkJob{Export: e, Attempt: 1})[e]
	if len(units) != 1 || units[0].Chunk.Snapshot == nil {
		t.Fatalf("%d chunks, want 1 with a snapshot", len(units))
	}
	snap := units[0].Chunk.Snapshot
	t.Logf("chunk snapshot %+v; committed xid %d, open xid %d", snap, committed, running)
	if !snap.Sees(uint32(committed)) {
		t.Errorf("the chunk's snapshot %+v does not see xid %d, committed before the copy", snap, committed)
	}
	if snap.Sees(uint32(running)) {
		t.Errorf("the chunk's snapshot %+v sees xid %d, open during the copy", snap, running)
	}
	if units[0].Chunk.Read != 1 {
		t.Errorf("the chunk read %d rows, want 1 (the open transaction's row is not visible)", units[0].Chunk.Read)
	}
}

// TestChunkSnapshotMissesCommittedTransaction makes, in real PostgreSQL, the situation behind
// a stale chunk row: a transaction whose commit record precedes the chunk's low marker (so the
// stream delivers it before the window opens) while its xid is still in the proc array when
// the chunk's snapshot is taken. A synchronous-replication wait holds it there: PostgreSQL
// writes and flushes the commit record and marks the xid committed, then waits for a standby
// (here one that never comes) before it takes the xid out of the proc array. The chunk's
// snapshot must say whether it saw that transaction, and say it truly: the chunk's row of the
// key is the transaction's version exactly when the snapshot sees it. (The chunker's wait after
// the low marker lists running transactions from pg_snapshot_xip, which leaves out those at or
// above the snapshot's xmax: the newest transaction is not waited for, and the chunk reads the
// row from before it.)
func TestChunkSnapshotMissesCommittedTransaction(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	pid, done, xid, commitEnd := holdUpdate(t, url, conn, schema)
	release := func() {
		execTest(t, conn, "SELECT pg_cancel_backend($1)", pid)
		if err := <-done; err != nil {
			t.Errorf("held update: %v", err)
		}
	}
	// The chunker waits for a committed transaction it sees running: let it go after a while.
	timer := time.AfterFunc(3*time.Second, release)
	defer func() {
		if timer.Stop() {
			release()
		}
	}()

	e := change.ExportID{Schema: schema, Table: "held"}
	cfg := Config{ConnString: url, Workers: 1, Codec: codec.Config{TopicPrefix: "tp"}, Logger: testLogger(t)}
	units := runChunker(t, cfg, ChunkJob{Export: e, Attempt: 1})[e]
	if len(units) != 1 {
		t.Fatalf("%d chunks, want 1", len(units))
	}
	u := units[0]
	if u.Commit <= commitEnd {
		t.Fatalf("low marker %s not after the held transaction's commit record (WAL at %s)", u.Commit, commitEnd)
	}
	newRow := false
	for _, r := range u.Records {
		if string(r.Key) == `{"id":5}` {
			newRow = strings.Contains(string(r.Value), `"new"`)
		}
	}
	seen := u.Chunk.Snapshot.Sees(xid)
	t.Logf("held xid %d committed below %s; chunk snapshot %+v, low marker %s: sees it %v, row of id 5 is its version %v",
		xid, commitEnd, u.Chunk.Snapshot, u.Commit, seen, newRow)
	if seen != newRow {
		t.Errorf("the chunk's snapshot sees the held transaction: %v; its row of id 5 is that transaction's version: %v", seen, newRow)
	}
}

// holdUpdate makes table held of schema (ids 1 to 10, v 'old') and updates id 5 to 'new' in a
// session that, with synchronous_standby_names naming a standby that never comes, waits after
// its commit record with its xid still in the proc array. It returns that session's pid, the
// update's result (once the session is cancelled), its xid and the end of its commit record.
func holdUpdate(t *testing.T, url string, conn *pgx.Conn, schema string) (int32, chan error, uint32, change.LSN) {
	t.Helper()
	tbl := pgcat.Ident(schema) + ".held"
	execTest(t, conn, "CREATE TABLE "+tbl+" (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = false)")
	execTest(t, conn, "INSERT INTO "+tbl+" SELECT g, 'old' FROM generate_series(1, 10) g")
	execTest(t, conn, "ALTER SYSTEM SET synchronous_standby_names = 'tidemark_never'")
	execTest(t, conn, "SELECT pg_reload_conf()")
	t.Cleanup(func() {
		execTest(t, conn, "ALTER SYSTEM RESET synchronous_standby_names")
		execTest(t, conn, "SELECT pg_reload_conf()")
	})
	awaitReload(t, url)
	held := connectTest(t, url)
	var pid int32
	if err := held.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	execTest(t, held, "SET synchronous_commit = on")
	done := make(chan error, 1)
	go func() {
		_, err := held.Exec(context.Background(), "UPDATE "+tbl+" SET v = 'new' WHERE id = 5")
		done <- err
	}()
	xid, commitEnd := waitSyncRep(t, conn, pid)
	return pid, done, xid, commitEnd
}

// awaitReload waits until a new session sees the missing standby: pg_reload_conf only signals
// the postmaster, and a session forked before it re-read the configuration keeps the old one
// (under load the held update then committed without waiting).
func awaitReload(t *testing.T, url string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		var names string
		err = c.QueryRow(t.Context(), "SHOW synchronous_standby_names").Scan(&names)
		c.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if names == "tidemark_never" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("new sessions still see synchronous_standby_names %q 30s after pg_reload_conf", names)
		}
	}
}

// waitSyncRep waits until backend pid waits for synchronous replication and returns its xid and
// the WAL position then (past its commit record).
func waitSyncRep(t *testing.T, conn *pgx.Conn, pid int32) (uint32, change.LSN) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var (
			xid *int64
			lsn string
		)
		// Nothing here takes an xid: a transaction completed after the held one would move
		// the snapshots' xmax past it.
		err := conn.QueryRow(t.Context(), `SELECT backend_xid::text::int8, pg_current_wal_lsn()::text
			FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'`, pid).Scan(&xid, &lsn)
		if err == nil && xid != nil {
			pos, err := change.ParseLSN(lsn)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(*xid), pos
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the held update never waited for synchronous replication")
	return 0, 0
}

// TestChunkWaitsForStreamedTransaction: the same held transaction as in
// TestChunkSnapshotMissesCommittedTransaction, but the stream delivered it before the copy
// started (Streamed names it): its changes were published by nobody, so the chunk must not be
// handed over under a snapshot that misses it. The chunker reads it again once the transaction
// left the proc array (the test lets it go after 3 s): the chunk's row of id 5 is its version.
func TestChunkWaitsForStreamedTransaction(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	pid, done, xid, _ := holdUpdate(t, url, conn, schema)
	released := time.Now().Add(3 * time.Second)
	canceller := connectTest(t, url) // not conn: the cleanup uses it, perhaps while this runs
	timer := time.AfterFunc(3*time.Second, func() { execTest(t, canceller, "SELECT pg_cancel_backend($1)", pid) })
	defer timer.Stop()

	e := change.ExportID{Schema: schema, Table: "held"}
	cfg := Config{ConnString: url, Workers: 1, Codec: codec.Config{TopicPrefix: "tp"}, Logger: testLogger(t)}
	rec := newChunkRecorder(1)
	rec.streamed = []uint32{xid - 2, xid} // with one the snapshot sees
	units := runChunkerWith(t, cfg, rec, ChunkJob{Export: e, Attempt: 1})[e]
	if err := <-done; err != nil {
		t.Errorf("held update: %v", err)
	}
	if len(units) != 1 {
		t.Fatalf("%d chunks, want 1", len(units))
	}
	newRow := false
	for _, r := range units[0].Records {
		if string(r.Key) == `{"id":5}` {
			newRow = strings.Contains(string(r.Value), `"new"`)
		}
	}
	t.Logf("held xid %d; chunk snapshot %+v; handed over %v after the release", xid, units[0].Chunk.Snapshot, time.Since(released).Round(time.Millisecond))
	if !newRow || !units[0].Chunk.Snapshot.Sees(xid) {
		t.Errorf("the chunk was handed over under a snapshot that misses the streamed transaction %d (row of id 5 is its version: %v)", xid, newRow)
	}
}
