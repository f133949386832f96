package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// The tests in this file need a PostgreSQL with wal_level=logical: internal/testenv gives
// one (CDC_TEST_PG_URL, Docker, or a server it starts from local binaries); they skip with
// -short, and fail in CI when no server can be had.

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// testPGURL returns a fresh database of its own for the test.
func testPGURL(tb testing.TB) string {
	tb.Helper()
	return testenv.NewDB(tb)
}

func connectTest(tb testing.TB, url string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func execTest(tb testing.TB, conn *pgx.Conn, sql string, args ...any) {
	tb.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatalf("exec %.80s: %v", sql, err)
	}
}

// testSchema creates a schema with a mixed-case unicode name, dropped at the end.
func testSchema(tb testing.TB, conn *pgx.Conn) string {
	tb.Helper()
	name := fmt.Sprintf("Snap Tëst %d", rand.Uint32())
	execTest(tb, conn, "CREATE SCHEMA "+pgcat.Ident(name))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgcat.Ident(name)+" CASCADE")
	})
	return name
}

// recordingHooks records the stage's calls and lets a test act inside Begin.
type recordingHooks struct {
	mu       sync.Mutex
	c        change.LSN
	tables   []TableInfo
	begins   int
	restarts map[change.ExportID]string
	failed   map[change.ExportID]error
	onBegin  func(c change.LSN) error
}

func newRecordingHooks() *recordingHooks {
	return &recordingHooks{restarts: map[change.ExportID]string{}, failed: map[change.ExportID]error{}}
}

func (h *recordingHooks) Begin(ctx context.Context, c change.LSN, tables []TableInfo) (map[change.ExportID]int, error) {
	h.mu.Lock()
	h.c, h.tables = c, tables
	h.begins++
	h.mu.Unlock()
	if h.onBegin != nil {
		if err := h.onBegin(c); err != nil {
			return nil, err
		}
	}
	attempts := map[change.ExportID]int{}
	for i, t := range tables {
		attempts[t.Table.Export] = 10 + i
	}
	return attempts, nil
}

func (h *recordingHooks) Restart(e change.ExportID, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.restarts[e] = reason
}

func (h *recordingHooks) Failed(e change.ExportID, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed[e] = err
}

// runRequest runs one request through a new stage and returns the units in arrival order. check,
// when set, is called for each unit as it arrives.
func runRequest(tb testing.TB, cfg Config, hooks Hooks, req Request, check func(*change.Unit)) []*change.Unit {
	tb.Helper()
	st, err := New(cfg, hooks)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reqs := make(chan Request, 1)
	reqs <- req
	close(reqs)
	out := make(chan *change.Unit, 16)
	errc := make(chan error, 1)
	go func() {
		errc <- st.Run(ctx, reqs, out)
		close(out)
	}()
	var units []*change.Unit
	for u := range out {
		if check != nil {
			check(u)
		}
		units = append(units, u)
	}
	if err := <-errc; err != nil {
		tb.Fatalf("Run: %v", err)
	}
	return units
}

func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func currentLSN(tb testing.TB, conn *pgx.Conn) change.LSN {
	tb.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		tb.Fatal(err)
	}
	l, err := change.ParseLSN(s)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func tempSlots(tb testing.TB, conn *pgx.Conn, prefix string) []string {
	tb.Helper()
	rows, err := conn.Query(context.Background(), "SELECT slot_name::text FROM pg_replication_slots WHERE slot_name LIKE $1", prefix+"\\_snap\\_%")
	if err != nil {
		tb.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	return names
}

// envelope is the part of a record value the tests read.
type envelope struct {
	After  map[string]any `json:"after"`
	Op     string         `json:"op"`
	Source struct {
		LSN     uint64 `json:"lsn"`
		Attempt int    `json:"attempt"`
	} `json:"source"`
}

// collected groups units per export and checks the ordering contract: every KindSnapshot unit of
// an export precedes its single KindSnapshotDone unit.
type collected struct {
	after map[change.ExportID][]map[string]any
	done  map[change.ExportID]int
	rows  map[change.ExportID]int
}

func collect(tb testing.TB, units []*change.Unit, c change.LSN) collected {
	tb.Helper()
	col := collected{after: map[change.ExportID][]map[string]any{}, done: map[change.ExportID]int{}, rows: map[change.ExportID]int{}}
	for i, u := range units {
		switch u.Kind {
		case change.KindSnapshot:
			if n, ok := col.done[u.Export]; ok {
				tb.Fatalf("unit %d of %s arrives after its snapshot-done unit %d", i, u.Export, n)
			}
			if u.Rows != len(u.Records) {
				tb.Fatalf("unit %d of %s: Rows %d but %d records", i, u.Export, u.Rows, len(u.Records))
			}
			col.rows[u.Export] += u.Rows
			for _, rec := range u.Records {
				var env envelope
				if err := json.Unmarshal(rec.Value, &env); err != nil {
					tb.Fatalf("decode envelope %s: %v", rec.Value, err)
				}
				if env.Op != "r" || change.LSN(env.Source.LSN) != c-1 {
					tb.Fatalf("record of %s: op %q lsn %d, want r and C-1 = %d", u.Export, env.Op, env.Source.LSN, c-1)
				}
				if rec.Topic != change.TopicName("tp", u.Export) {
					tb.Fatalf("record of %s on topic %s", u.Export, rec.Topic)
				}
				col.after[u.Export] = append(col.after[u.Export], env.After)
			}
		case change.KindSnapshotDone:
			if _, ok := col.done[u.Export]; ok {
				tb.Fatalf("two snapshot-done units for %s", u.Export)
			}
			col.done[u.Export] = i
		default:
			tb.Fatalf("unexpected unit kind %s", u.Kind)
		}
	}
	return col
}

// keySet renders the values of column col of every row as strings and fails on duplicates.
func keySet(tb testing.TB, rows []map[string]any, col string) []string {
	tb.Helper()
	var keys []string
	for _, r := range rows {
		v, ok := r[col]
		if !ok {
			tb.Fatalf("row without column %q: %v", col, r)
		}
		keys = append(keys, fmt.Sprint(v))
	}
	slices.Sort(keys)
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			tb.Fatalf("key %s of column %q appears twice", keys[i], col)
		}
	}
	return keys
}

func queryStrings(tb testing.TB, conn *pgx.Conn, sql string) []string {
	tb.Helper()
	rows, err := conn.Query(context.Background(), sql)
	if err != nil {
		tb.Fatalf("query %s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func TestSnapshotIntegration(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	q := func(table string) string { return pgcat.Ident(schema) + "." + pgcat.Ident(table) }

	execTest(t, conn, "CREATE TABLE "+q("big")+" (id int PRIMARY KEY, payload text, n numeric, ts timestamptz)")
	execTest(t, conn, "INSERT INTO "+q("big")+` SELECT g, repeat('x', g % 50) || E'\t' || g, g * 1.5, '2024-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, 50000) g`)
	execTest(t, conn, "CREATE TABLE "+q("big child")+" () INHERITS ("+q("big")+")")
	execTest(t, conn, "INSERT INTO "+q("big child")+" VALUES (999999, 'child row')")
	execTest(t, conn, "CREATE TABLE "+q("empty")+" (id int PRIMARY KEY)")
	weird := `Mïxed "Case" Täble`
	execTest(t, conn, "CREATE TABLE "+q(weird)+` ("Kéy Col" text PRIMARY KEY, "Wëird"" Text" text, f float8, iv interval, j jsonb, b bytea, arr text[], u uuid, ok boolean, "Gen" int GENERATED ALWAYS AS (length("Kéy Col")) STORED)`)
	weirdTexts := []string{"tab\there", "new\nline", `back\slash`, `\N`, "ünïcödé ✓", "", "cr\rlf", "quote ' and \" both"}
	for i, s := range weirdTexts {
		execTest(t, conn, "INSERT INTO "+q(weird)+` VALUES ($1, $2, $3, '1 day 02:03:04', '{"a":[1,"two"]}', '\x00ff', ARRAY['a b', NULL, 'c"d'], gen_random_uuid(), $4)`,
			fmt.Sprintf("key %d %s", i, s), s, []float64{1.5, -0.0, 1e300}[i%3], i%2 == 0)
	}
	execTest(t, conn, "INSERT INTO "+q(weird)+` ("Kéy Col", f) VALUES ('nulls', 'NaN')`)
	execTest(t, conn, "ANALYZE "+q("big"))

	before := currentLSN(t, conn)
	hooks := newRecordingHooks()
	prefix := fmt.Sprintf("snaptest%d", rand.Uint32()%100000)
	exports := []change.ExportID{{Schema: schema, Table: "big"}, {Schema: schema, Table: "empty"}, {Schema: schema, Table: weird}}
	var checkedSlot bool
	reg := prometheus.NewRegistry()
	units := runRequest(t, Config{
		Registerer:  reg,
		ConnString:  url,
		Workers:     4,
		SlotPrefix:  prefix,
		Codec:       codec.Config{TopicPrefix: "tp", Database: "postgres"},
		BatchRows:   500,
		RangeBlocks: 16, // many ranges for a 50k-row table
		Logger:      testLogger(t),
	}, hooks, Request{Exports: append(exports, exports[0])}, func(*change.Unit) {
		if !checkedSlot {
			checkedSlot = true
			// The exporting connection is closed before the copy; its walsender drops the
			// temporary slot as it exits, which can take a moment on a busy machine.
			deadline := time.Now().Add(10 * time.Second)
			s := tempSlots(t, conn, prefix)
			for len(s) != 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				s = tempSlots(t, conn, prefix)
			}
			if len(s) != 0 {
				t.Errorf("temporary slot %v still exists 10s into the copy", s)
			}
		}
	})

	if hooks.begins != 1 || len(hooks.tables) != 3 {
		t.Fatalf("Begin called %d times with %d tables, want once with 3", hooks.begins, len(hooks.tables))
	}
	if hooks.c < before {
		t.Fatalf("consistent point %s is before the WAL position %s read before the request", hooks.c, before)
	}
	if len(hooks.restarts) != 0 || len(hooks.failed) != 0 {
		t.Fatalf("unexpected restarts %v / failures %v", hooks.restarts, hooks.failed)
	}
	if s := tempSlots(t, conn, prefix); len(s) != 0 {
		t.Fatalf("temporary slots left after the request: %v", s)
	}
	for _, ti := range hooks.tables {
		if ti.Table.Export.Table == weird {
			var names []string
			for _, c := range ti.Table.Columns {
				names = append(names, c.Name)
			}
			if slices.Contains(names, "Gen") || !ti.Table.Columns[0].Key {
				t.Fatalf("weird table columns %v: generated column included or key missing", names)
			}
		}
		if ti.Table.Export.Table == "big" && (ti.Blocks < 100 || ti.EstimatedRows < 40000 || ti.EstimatedRows > 60000) {
			t.Fatalf("big table info: %d blocks, %d estimated rows", ti.Blocks, ti.EstimatedRows)
		}
	}

	col := collect(t, units, hooks.c)
	for i, e := range exports {
		if _, ok := col.done[e]; !ok {
			t.Fatalf("no snapshot-done unit for %s", e)
		}
		for _, u := range units {
			if u.Export == e && u.Attempt != 10+i {
				t.Fatalf("unit of %s has attempt %d, want %d", e, u.Attempt, 10+i)
			}
		}
	}

	bigLabel := exports[0].String()
	for name, want := range map[string]float64{
		"tidemark_snapshot_rows_total":     50000,
		"tidemark_snapshot_progress_ratio": 1,
		"tidemark_snapshot_eta_seconds":    0,
	} {
		if got := gatherValue(t, reg, name, bigLabel); got != want {
			t.Errorf("%s{export=%q} = %v, want %v", name, bigLabel, got, want)
		}
	}
	if got := gatherValue(t, reg, "tidemark_snapshot_rows_estimated", bigLabel); got < 40000 || got > 60000 {
		t.Errorf("tidemark_snapshot_rows_estimated = %v, want about 50000", got)
	}

	// Every row exactly once.
	wantBig := queryStrings(t, conn, "SELECT id::text FROM ONLY "+q("big"))
	if got := keySet(t, col.after[exports[0]], "id"); !slices.Equal(got, wantBig) {
		t.Fatalf("big: got %d keys, want %d", len(got), len(wantBig))
	}
	if col.rows[exports[0]] != 50000 {
		t.Fatalf("big: %d rows in units, want 50000", col.rows[exports[0]])
	}
	if n := len(col.after[exports[1]]); n != 0 {
		t.Fatalf("empty: %d rows", n)
	}
	wantWeird := queryStrings(t, conn, `SELECT "Kéy Col" FROM `+q(weird))
	if got := keySet(t, col.after[exports[2]], "Kéy Col"); !slices.Equal(got, wantWeird) {
		t.Fatalf("weird keys:\n got %q\nwant %q", got, wantWeird)
	}
	// Text with tabs, newlines, backslashes and NULL survives COPY's escaping unchanged.
	for _, row := range col.after[exports[2]] {
		var want *string
		if err := conn.QueryRow(t.Context(), `SELECT "Wëird"" Text" FROM `+q(weird)+` WHERE "Kéy Col" = $1`, row["Kéy Col"]).Scan(&want); err != nil {
			t.Fatal(err)
		}
		got := row[`Wëird" Text`]
		if want == nil && got != nil || want != nil && got != *want {
			t.Fatalf("row %q: text %q, want %v", row["Kéy Col"], got, want)
		}
	}
}

func gatherValue(tb testing.TB, reg *prometheus.Registry, name, export string) float64 {
	tb.Helper()
	families, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "export" && l.GetValue() == export {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	tb.Fatalf("metric %s{export=%q} not found", name, export)
	return 0
}

// TestSnapshotCancel cancels the context while workers are blocked sending, and checks that Run
// returns the context's error promptly and leaves no slot or COPY behind.
func TestSnapshotCancel(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	execTest(t, conn, "CREATE TABLE "+pgcat.Ident(schema)+".t (id int PRIMARY KEY, v text)")
	execTest(t, conn, "INSERT INTO "+pgcat.Ident(schema)+".t SELECT g, repeat('v', 100) FROM generate_series(1, 100000) g")
	st, err := New(Config{ConnString: url, Workers: 2, SlotPrefix: "snaptest_cancel", BatchRows: 100, RangeBlocks: 64,
		Codec: codec.Config{TopicPrefix: "tp"}, Logger: testLogger(t)}, newRecordingHooks())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reqs := make(chan Request, 1)
	reqs <- Request{Exports: []change.ExportID{{Schema: schema, Table: "t"}}}
	out := make(chan *change.Unit)
	errc := make(chan error, 1)
	go func() { errc <- st.Run(ctx, reqs, out) }()
	select {
	case <-out: // the copy is running; nobody reads any more
	case err := <-errc:
		t.Fatalf("Run returned before sending: %v", err)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var copies int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY (SELECT%' AND pid <> pg_backend_pid()").Scan(&copies); err != nil {
			t.Fatal(err)
		}
		if copies == 0 && len(tempSlots(t, conn, "snaptest_cancel")) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d COPY sessions or a slot still alive after Run returned", copies)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSnapshotRewriteAndDrop rewrites one table and drops another after the consistent point; the
// third table of the request must still finish.
func TestSnapshotRewriteAndDrop(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	ddl := connectTest(t, url)
	schema := testSchema(t, conn)
	q := func(table string) string { return pgcat.Ident(schema) + "." + pgcat.Ident(table) }
	for _, name := range []string{"rewritten", "dropped", "kept"} {
		execTest(t, conn, "CREATE TABLE "+q(name)+" (id int PRIMARY KEY, v int)")
		execTest(t, conn, "INSERT INTO "+q(name)+" SELECT g, g FROM generate_series(1, 2000) g")
	}
	hooks := newRecordingHooks()
	hooks.onBegin = func(change.LSN) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := ddl.Exec(ctx, "ALTER TABLE "+q("rewritten")+" ALTER COLUMN v TYPE bigint"); err != nil {
			return fmt.Errorf("rewrite: %w", err)
		}
		if _, err := ddl.Exec(ctx, "DROP TABLE "+q("dropped")); err != nil {
			return fmt.Errorf("drop: %w", err)
		}
		return nil
	}
	missing := change.ExportID{Schema: schema, Table: "never existed"}
	ids := map[string]change.ExportID{}
	var req Request
	for _, name := range []string{"rewritten", "dropped", "kept"} {
		ids[name] = change.ExportID{Schema: schema, Table: name}
		req.Exports = append(req.Exports, ids[name])
	}
	req.Exports = append(req.Exports, missing)
	units := runRequest(t, Config{ConnString: url, Workers: 2, SlotPrefix: "snaptest_rw", Codec: codec.Config{TopicPrefix: "tp"}, Logger: testLogger(t)}, hooks, req, nil)

	col := collect(t, units, hooks.c)
	if _, ok := col.done[ids["kept"]]; !ok || len(col.after[ids["kept"]]) != 2000 {
		t.Fatalf("kept: done=%v rows=%d, want done and 2000", ok, len(col.after[ids["kept"]]))
	}
	if _, ok := col.done[ids["rewritten"]]; ok {
		t.Fatal("rewritten table got a snapshot-done unit")
	}
	if r := hooks.restarts[ids["rewritten"]]; !strings.Contains(r, "rewritten") {
		t.Fatalf("restart reason for the rewritten table = %q", r)
	}
	if _, ok := col.done[ids["dropped"]]; ok {
		t.Fatal("dropped table got a snapshot-done unit")
	}
	if err := hooks.failed[ids["dropped"]]; !errors.Is(err, pgcat.ErrTableNotFound) {
		t.Fatalf("dropped table: Failed(%v), want pgcat.ErrTableNotFound", err)
	}
	if err := hooks.failed[missing]; !errors.Is(err, pgcat.ErrTableNotFound) {
		t.Fatalf("missing table: Failed(%v), want pgcat.ErrTableNotFound", err)
	}
	if len(hooks.tables) != 3 {
		t.Fatalf("Begin got %d tables, want 3 (the missing one failed before)", len(hooks.tables))
	}
}

// TestSnapshotSlotWait holds a transaction with an xid open, so slot creation must wait, and
// checks that the request gives up with an error naming that transaction.
func TestSnapshotSlotWait(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	blocker := connectTest(t, url)
	schema := testSchema(t, conn)
	execTest(t, conn, "CREATE TABLE "+pgcat.Ident(schema)+".t (id int PRIMARY KEY)")
	tx, err := blocker.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), "INSERT INTO "+pgcat.Ident(schema)+".t VALUES (1) /* the blocker */"); err != nil {
		t.Fatal(err)
	}
	hooks := newRecordingHooks()
	e := change.ExportID{Schema: schema, Table: "t"}
	units := runRequest(t, Config{ConnString: url, SlotPrefix: "snaptest_wait", SlotWaitTimeout: 4 * time.Second, Logger: testLogger(t)}, hooks, Request{Exports: []change.ExportID{e}}, nil)
	if len(units) != 0 || hooks.begins != 0 {
		t.Fatalf("%d units and %d Begin calls, want none", len(units), hooks.begins)
	}
	var waitErr *SlotWaitError
	if err := hooks.failed[e]; !errors.As(err, &waitErr) {
		t.Fatalf("Failed(%v), want a *SlotWaitError", err)
	}
	if msg := waitErr.Error(); !strings.Contains(msg, "the blocker") || !strings.Contains(msg, "pid") {
		t.Fatalf("error does not name the blocking transaction: %s", msg)
	}
	if s := tempSlots(t, conn, "snaptest_wait"); len(s) != 0 {
		t.Fatalf("temporary slot left: %v", s)
	}
}

// BenchmarkSnapshotCopy copies a 500k-row table with 2 workers and reports rows/s.
func BenchmarkSnapshotCopy(b *testing.B) {
	url := testPGURL(b)
	conn := connectTest(b, url)
	schema := testSchema(b, conn)
	table := pgcat.Ident(schema) + ".bench"
	execTest(b, conn, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, name text, amount numeric(12,2), created timestamptz, flag boolean)")
	execTest(b, conn, "INSERT INTO "+table+` SELECT g, 'customer ' || g, g * 0.37, '2024-01-01'::timestamptz + g * interval '1 minute', g % 3 = 0 FROM generate_series(1, 500000) g`)
	execTest(b, conn, "VACUUM ANALYZE "+table)
	cfg := Config{ConnString: url, Workers: 2, SlotPrefix: "snapbench", Codec: codec.Config{TopicPrefix: "tp"},
		RangeBlocks: 256, Logger: slog.New(slog.DiscardHandler)}
	req := Request{Exports: []change.ExportID{{Schema: schema, Table: "bench"}}}
	var rows int
	start := time.Now()
	for b.Loop() {
		for _, u := range runRequest(b, cfg, newRecordingHooks(), req, nil) {
			rows += u.Rows
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(rows)/el.Seconds(), "rows/s")
	b.Logf("copied %d rows in %s with 2 workers: %.0f rows/s", rows, el.Round(time.Millisecond), float64(rows)/el.Seconds())
}

// TestSnapshotNoFreeSlot fills every replication slot and checks that the request's exports fail
// with ErrNoReplicationCapacity and a message naming max_replication_slots.
func TestSnapshotNoFreeSlot(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	execTest(t, conn, "CREATE TABLE "+pgcat.Ident(schema)+".t (id int PRIMARY KEY)")
	var free int
	if err := conn.QueryRow(t.Context(), "SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)").Scan(&free); err != nil {
		t.Fatal(err)
	}
	for i := range free {
		name := fmt.Sprintf("snaptest_fill_%d", i)
		execTest(t, conn, "SELECT pg_create_physical_replication_slot($1)", name)
		t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", name) })
	}
	hooks := newRecordingHooks()
	e := change.ExportID{Schema: schema, Table: "t"}
	units := runRequest(t, Config{ConnString: url, SlotPrefix: "snaptest_full", Logger: testLogger(t)}, hooks, Request{Exports: []change.ExportID{e}}, nil)
	if len(units) != 0 || hooks.begins != 0 {
		t.Fatalf("%d units and %d Begin calls, want none", len(units), hooks.begins)
	}
	err := hooks.failed[e]
	if !errors.Is(err, ErrNoReplicationCapacity) || !strings.Contains(err.Error(), "max_replication_slots") {
		t.Fatalf("Failed(%v), want ErrNoReplicationCapacity naming max_replication_slots", err)
	}
}

// TestSnapshotConnectionLostRetries cuts the copy's connections in the middle: the stage does
// not end, it reports the unfinished table for a new attempt (Hooks.Restart) and goes on serving.
func TestSnapshotConnectionLostRetries(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	execTest(t, conn, "CREATE TABLE "+pgcat.Ident(schema)+".t (id int PRIMARY KEY, v text)")
	execTest(t, conn, "INSERT INTO "+pgcat.Ident(schema)+".t SELECT g, repeat('v', 100) FROM generate_series(1, 100000) g")
	e := change.ExportID{Schema: schema, Table: "t"}
	hooks := newRecordingHooks()
	cut := false
	runRequest(t, Config{ConnString: url, Workers: 2, SlotPrefix: "snaptest_cut", BatchRows: 100, RangeBlocks: 64,
		Codec: codec.Config{TopicPrefix: "tp"}, Logger: testLogger(t)}, hooks,
		Request{Exports: []change.ExportID{e}}, func(u *change.Unit) {
			if cut || u.Kind != change.KindSnapshot {
				return
			}
			cut = true
			var n int
			err := conn.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n)
			if err != nil || n == 0 {
				t.Errorf("terminate the copy's connections: %d, %v", n, err)
			}
		})
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	if reason := hooks.restarts[e]; !strings.Contains(reason, "snapshot interrupted") {
		t.Fatalf("restart of %s = %q, want a new attempt after the lost connection (restarts %v, failed %v)", e, reason, hooks.restarts, hooks.failed)
	}
}
