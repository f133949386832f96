package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// schemaCase is one schema change, applied to a table of its own:
//
//	CREATE TABLE <t> (id int PRIMARY KEY, u int NOT NULL UNIQUE, a int NOT NULL, b text)
type schemaCase struct {
	name string
	// alter is run after fmt.Sprintf with the table's name.
	alter string
	// cols and key are the columns the records carry after the change, and the key columns.
	cols, key []string
	// fails: the change leaves the export without a key; it must stop alone with a failed
	// record.
	fails bool
	// renamed: the table is renamed to <t>_renamed.
	renamed bool
	// textA: column a is text after the change (its values are JSON strings).
	textA bool
}

var schemaCases = []schemaCase{
	{name: "add_column", alter: `ALTER TABLE %s ADD COLUMN c text`, cols: []string{"id", "u", "a", "b", "c"}, key: []string{"id"}},
	{name: "add_column_default", alter: `ALTER TABLE %s ADD COLUMN d int NOT NULL DEFAULT 7`, cols: []string{"id", "u", "a", "b", "d"}, key: []string{"id"}},
	// A volatile default rewrites the table.
	{name: "add_column_volatile", alter: `ALTER TABLE %s ADD COLUMN v uuid DEFAULT gen_random_uuid()`, cols: []string{"id", "u", "a", "b", "v"}, key: []string{"id"}},
	{name: "drop_column", alter: `ALTER TABLE %s DROP COLUMN b`, cols: []string{"id", "u", "a"}, key: []string{"id"}},
	{name: "rename_column", alter: `ALTER TABLE %s RENAME COLUMN b TO b2`, cols: []string{"id", "u", "a", "b2"}, key: []string{"id"}},
	// Rewrites the table.
	{name: "alter_type", alter: `ALTER TABLE %s ALTER COLUMN a TYPE text USING a::text`, cols: []string{"id", "u", "a", "b"}, key: []string{"id"}, textA: true},
	{name: "new_primary_key", alter: `ALTER TABLE %[1]s DROP CONSTRAINT %[1]s_pkey, ADD PRIMARY KEY (id, a)`, cols: []string{"id", "u", "a", "b"}, key: []string{"id", "a"}},
	{name: "replica_identity_index", alter: `ALTER TABLE %[1]s REPLICA IDENTITY USING INDEX %[1]s_u_key`, cols: []string{"id", "u", "a", "b"}, key: []string{"u"}},
	{name: "replica_identity_full", alter: `ALTER TABLE %s REPLICA IDENTITY FULL`, cols: []string{"id", "u", "a", "b"}, key: []string{"id"}},
	{name: "drop_primary_key", alter: `ALTER TABLE %[1]s DROP CONSTRAINT %[1]s_pkey`, fails: true},
	{name: "replica_identity_nothing", alter: `ALTER TABLE %s REPLICA IDENTITY NOTHING`, fails: true},
	{name: "rename_table", alter: `ALTER TABLE %s RENAME TO %[1]s_renamed`, cols: []string{"id", "u", "a", "b"}, key: []string{"id"}, renamed: true},
}

func (c schemaCase) table() string { return "sc_" + c.name }

func (c schemaCase) live() string {
	if c.renamed {
		return c.table() + "_renamed"
	}
	return c.table()
}

// schemaWriter changes rows of every case's table until stopped: an insert, an update and
// now and then a delete per table and tick, with statements that are valid before and after
// every change. Errors are expected (a table without replica identity refuses updates, a
// renamed table is gone under its old name) and only counted.
type schemaWriter struct {
	mu     sync.Mutex
	names  map[string]string // case name -> table name to write
	errs   int
	stmts  int
	stop   chan struct{}
	done   chan struct{}
	nextID int
}

func (e *env) startSchemaWriter(ctx context.Context, rows int) *schemaWriter {
	e.t.Helper()
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		e.t.Fatal(err)
	}
	w := &schemaWriter{names: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{}), nextID: 1_000_000}
	for _, c := range schemaCases {
		w.names[c.name] = c.table()
	}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
		for tick := 0; ; tick++ {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			w.mu.Lock()
			names := maps.Clone(w.names)
			w.mu.Unlock()
			for _, tbl := range names {
				w.nextID++
				id := w.nextID
				stmts := []string{
					fmt.Sprintf(`INSERT INTO %s (id, u, a) VALUES (%d, %d, '%d')`, tbl, id, id, id),
					fmt.Sprintf(`UPDATE %s SET id = id WHERE id = %d`, tbl, 1+rng.IntN(rows)),
				}
				if tick%3 == 0 {
					stmts = append(stmts, fmt.Sprintf(`DELETE FROM %s WHERE id = %d`, tbl, 1+rng.IntN(rows)))
				}
				for _, s := range stmts {
					_, err := conn.Exec(ctx, s)
					w.mu.Lock()
					w.stmts++
					if err != nil {
						w.errs++
					}
					w.mu.Unlock()
					if ctx.Err() != nil {
						return
					}
				}
			}
		}
	}()
	e.t.Cleanup(w.finish)
	return w
}

func (w *schemaWriter) rename(c schemaCase) {
	w.mu.Lock()
	w.names[c.name] = c.live()
	w.mu.Unlock()
}

func (w *schemaWriter) finish() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// createSchemaTables creates every case's table with rows rows, and sc_filler with filler rows:
// the largest table is copied first, so a filler larger than the rate limiter's burst (20,000
// rows pass at once) makes the case tables' copies wait for the limiter.
func (e *env) createSchemaTables(rows, filler int) {
	e.t.Helper()
	sql := []string{
		`CREATE TABLE sc_filler (id int PRIMARY KEY, b text)`,
		fmt.Sprintf(`INSERT INTO sc_filler SELECT g, 'filler ' || g FROM generate_series(1, %d) g`, filler),
	}
	for _, c := range schemaCases {
		sql = append(sql,
			fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, u int NOT NULL UNIQUE, a int NOT NULL, b text)`, c.table()),
			fmt.Sprintf(`INSERT INTO %s SELECT g, g, g, 'row ' || g FROM generate_series(1, %d) g`, c.table(), rows))
	}
	e.exec(append(sql, "ANALYZE")...)
}

func schemaTableList() string {
	names := []string{"public.sc_filler"}
	for _, c := range schemaCases {
		names = append(names, "public."+c.table())
	}
	return strings.Join(names, ",")
}

// applySchemaChanges runs every case's change and returns, per case, the WAL position right
// after it committed: records at or above it were written after the change.
//
// The changes run at once, each on a connection of its own: one that waits for a lock (a table
// being read by a COPY) does not hold back the others.
func (e *env) applySchemaChanges(ctx context.Context, w *schemaWriter) map[string]change.LSN {
	e.t.Helper()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	at := map[string]change.LSN{}
	for _, c := range schemaCases {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, e.pgURL)
			if err != nil {
				e.t.Error(err)
				return
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, fmt.Sprintf(c.alter, c.table())); err != nil {
				e.t.Errorf("%s: %v", c.name, err)
				return
			}
			var s string
			if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
				e.t.Error(err)
				return
			}
			lsn, _ := change.ParseLSN(s)
			mu.Lock()
			at[c.name] = lsn
			mu.Unlock()
			if c.renamed {
				w.rename(c)
			}
		})
	}
	wg.Wait()
	return at
}

// TestSchemaChangesWhileStreaming: every schema change of schemaCases, applied to a streaming
// table under concurrent writes, is followed without a restart; key-destroying ones fail their
// export alone.
func TestSchemaChangesWhileStreaming(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const rows = 200
	e.createSchemaTables(rows, 10)
	vars := e.baseVars()
	vars["CDC_TABLES"] = schemaTableList()
	rec := e.recordWatermarks()
	p := e.startCDC(vars)
	var all []string
	for _, c := range schemaCases {
		all = append(all, "public."+c.table())
	}
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), all...)

	w := e.startSchemaWriter(ctx, rows)
	time.Sleep(time.Second)
	at := e.applySchemaChanges(ctx, w)
	time.Sleep(2 * time.Second)
	w.finish()
	t.Logf("writer: %d statements, %d refused", w.stmts, w.errs)
	e.checkSchemaCases(p, rec, at, nil)
	for _, c := range schemaCases {
		if c.fails || c.renamed {
			continue
		}
		id := change.ExportID{Schema: "public", Table: c.live()}
		for _, r := range rec.all() {
			if r.Export == id && r.Snapshot != nil && r.Snapshot.Attempt != 1 {
				t.Errorf("%s: snapshot attempt %d after its schema change; want the stream to follow it without a new copy", c.name, r.Snapshot.Attempt)
				break
			}
		}
	}
}

// TestSchemaChangesDuringChunkedCopy and TestSchemaChangesDuringCopy: the same changes,
// applied while the tables are being copied (slowed down by CDC_SNAPSHOT_MAX_ROWS_PER_SECOND).
func TestSchemaChangesDuringChunkedCopy(t *testing.T) { testSchemaChangesDuringCopy(t, "chunked") }

func TestSchemaChangesDuringCopy(t *testing.T) { testSchemaChangesDuringCopy(t, "copy") }

func testSchemaChangesDuringCopy(t *testing.T, strategy string) {
	e := newEnv(t)
	ctx := t.Context()
	const rows = 3000
	e.createSchemaTables(rows, 30_000)
	vars := e.baseVars()
	vars["CDC_TABLES"] = schemaTableList()
	vars["CDC_SNAPSHOT_STRATEGY"] = strategy
	if strategy == "chunked" {
		vars["CDC_SNAPSHOT_CHUNK_ROWS"] = "250" // with copy it is a contradiction
	}
	// One worker for copy: it copies the filler first, whole, so the case tables all wait. Chunked
	// copies interleave the chunks of every table.
	vars["CDC_SNAPSHOT_WORKERS"] = map[string]string{"chunked": "2", "copy": "1"}[strategy]
	// The first 20,000 rows pass at once (the limiter's burst): most of the filler, copied first.
	// The rest take about 20 s.
	vars["CDC_SNAPSHOT_MAX_ROWS_PER_SECOND"] = "2000"
	rec := e.recordWatermarks()
	p := e.startCDC(vars)
	w := e.startSchemaWriter(ctx, rows)
	// Every table is being copied: it has a hydrating record and none is hydrated yet.
	for _, c := range schemaCases {
		rec.first(t, time.Minute, change.ExportID{Schema: "public", Table: c.table()}, "state hydrating", func(r watermark.Record) bool {
			return r.State == watermark.StateHydrating
		})
	}
	start := time.Now()
	at := e.applySchemaChanges(ctx, w)
	t.Logf("changes applied in %s", time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	w.finish()
	t.Logf("writer: %d statements, %d refused", w.stmts, w.errs)
	e.checkSchemaCases(p, rec, at, func(c schemaCase, id change.ExportID) {
		// The change fell inside the copy: the table was not hydrated before it.
		for _, r := range rec.all() {
			if r.Export == id && r.State == watermark.StateHydrated && r.Time.Before(start) {
				t.Errorf("%s: hydrated at %s, before its change (%s); the test wants it during the copy", c.name, r.Time, start)
				break
			}
		}
	})
}

// checkSchemaCases waits for every live export to pass the current WAL position and checks each
// case: its topic against its table, the columns and key of every record written after the
// change, the failed record of key-destroying changes, and that nothing restarted the pipeline.
func (e *env) checkSchemaCases(p *proc, rec *recorder, at map[string]change.LSN, extra func(schemaCase, change.ExportID)) {
	t := e.t
	t.Helper()
	ctx := t.Context()
	end := e.currentLSN(ctx)
	var live []string
	for _, c := range schemaCases {
		if !c.fails {
			live = append(live, "public."+c.live())
		}
	}
	e.waitFor(p, 3*time.Minute, end, live...)
	for _, c := range schemaCases {
		id := change.ExportID{Schema: "public", Table: c.table()}
		if c.fails {
			r := rec.first(t, time.Minute, id, "state failed", func(r watermark.Record) bool { return r.State == watermark.StateFailed })
			if !strings.Contains(r.Error, "key") && !strings.Contains(r.Error, "identity") {
				t.Errorf("%s: failed record says %q; want the reason (no key / replica identity)", c.name, r.Error)
			}
			t.Logf("%s: failed: %s", c.name, r.Error)
			continue
		}
		if c.renamed {
			old := rec.first(t, time.Minute, id, "state removed", func(r watermark.Record) bool { return r.State == watermark.StateRemoved })
			var states []string
			for _, r := range rec.all() {
				if r.Export == id && (len(states) == 0 || states[len(states)-1] != string(r.State)) {
					states = append(states, string(r.State))
				}
			}
			t.Logf("%s: old name removed at watermark %v; its states: %v", c.name, old.Watermark, states)
		}
		liveID := change.ExportID{Schema: "public", Table: c.live()}
		if extra != nil {
			extra(c, id)
		}
		e.checkSchemaTopic(c, at[c.name])
		for _, r := range rec.all() {
			if r.Export == liveID && r.State == watermark.StateFailed {
				t.Errorf("%s: failed: %s", c.name, r.Error)
			}
		}
	}
	if n := strings.Count(p.log.String(), "pipeline failed; restarting"); n > 0 {
		t.Errorf("the pipeline restarted %d times; schema changes must stay local to their export", n)
	}
	// The table no change touched was copied once and its topic equals it.
	filler := change.ExportID{Schema: "public", Table: "sc_filler"}
	for _, r := range rec.all() {
		if r.Export == filler && (r.Snapshot == nil || r.Snapshot.Attempt != 1 || r.State == watermark.StateFailed) {
			t.Errorf("sc_filler: record %s with snapshot %+v; want attempt 1 only", r.State, r.Snapshot)
			break
		}
	}
	e.waitFor(p, time.Minute, end, "public.sc_filler")
	want := e.tableState("sc_filler", "id")
	assertSameState(t, "sc_filler", normState(t, materialize(t, e.readTopic(e.topic("public.sc_filler")))), normState(t, want))
}

// checkSchemaTopic compares c's live topic, materialised by id, with its table. Rows whose last
// record was written after the change must equal the table's row exactly; older ones on the
// columns both have (a row untouched since ADD COLUMN has no record with the column). Every
// record written after the change carries exactly the table's columns and c.key as its key.
func (e *env) checkSchemaTopic(c schemaCase, changed change.LSN) {
	t := e.t
	t.Helper()
	// A renamed table is a new export: its new topic is copied after the rename and must equal
	// the table alone.
	recs := e.readTopic(e.topic("public." + c.live()))
	checkOrder(t, recs)
	type row struct {
		after map[string]json.RawMessage
		lsn   uint64
	}
	state := map[string]row{}
	afterChange, badCols, badKey, badType := 0, 0, 0, 0
	for _, r := range recs {
		var k map[string]json.RawMessage
		if err := json.Unmarshal(r.Key, &k); err != nil {
			if r.Key == nil {
				continue // truncate
			}
			t.Fatalf("%s: key %q: %v", c.name, r.Key, err)
		}
		idv, ok := k["id"]
		if !ok {
			idv = k["u"] // u = id in every row
		}
		rowID := string(idv)
		env := decode(t, r)
		if env == nil || env.Op == "d" {
			delete(state, rowID)
			continue
		}
		state[rowID] = row{after: env.After, lsn: env.Source.LSN}
		if env.Source.LSN < uint64(changed) {
			continue
		}
		afterChange++
		if got := slices.Sorted(maps.Keys(env.After)); !slices.Equal(got, slices.Sorted(slices.Values(c.cols))) && badCols < 3 {
			badCols++
			t.Errorf("%s: record at lsn %s (op %s, snapshot %v) after the change has columns %v, want %v", c.name, change.LSN(env.Source.LSN), env.Op, env.Source.Snapshot, got, c.cols)
		}
		if got := slices.Sorted(maps.Keys(k)); !slices.Equal(got, slices.Sorted(slices.Values(c.key))) && badKey < 3 {
			badKey++
			t.Errorf("%s: record at lsn %s after the change has key %s, want columns %v", c.name, change.LSN(env.Source.LSN), r.Key, c.key)
		}
		if c.textA && !strings.HasPrefix(string(env.After["a"]), `"`) && badType < 3 {
			badType++
			t.Errorf("%s: record at lsn %s after the change has a = %s, want a string (the new type)", c.name, change.LSN(env.Source.LSN), env.After["a"])
		}
	}
	if afterChange == 0 {
		t.Errorf("%s: no record written after the change", c.name)
	}
	rows, err := e.conn().Query(context.Background(), fmt.Sprintf(`SELECT id::text, row_to_json(t)::text FROM %s t`, c.live()))
	if err != nil {
		t.Fatal(err)
	}
	table := map[string]map[string]json.RawMessage{}
	for rows.Next() {
		var id, js string
		if err := rows.Scan(&id, &js); err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			t.Fatal(err)
		}
		table[id] = m
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	bad := 0
	report := func(format string, args ...any) {
		if bad < 5 {
			t.Errorf("%s: "+format, append([]any{c.name}, args...)...)
		}
		bad++
	}
	for id, want := range table {
		got, ok := state[id]
		switch {
		case !ok:
			report("id %s is in the table but not in the topic", id)
		case got.lsn >= uint64(changed):
			if !sameRow(got.after, want) {
				report("id %s differs:\n topic %s\n table %s", id, mustJSON(got.after), mustJSON(want))
			}
		default:
			common := map[string]json.RawMessage{}
			for col := range got.after {
				if v, ok := want[col]; ok {
					common[col] = v
				}
			}
			if len(common) < 2 || !sameRow(common, pick(got.after, common)) {
				report("id %s (last record before the change) differs:\n topic %s\n table %s", id, mustJSON(got.after), mustJSON(want))
			}
		}
	}
	for id := range state {
		if _, ok := table[id]; !ok {
			report("id %s is in the topic but not in the table", id)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d differences (%d rows in the table, %d in the topic)", c.name, bad, len(table), len(state))
		return
	}
	t.Logf("%s: %d records, %d after the change; topic equals table (%d rows)", c.name, len(recs), afterChange, len(table))
}

func pick(m map[string]json.RawMessage, like map[string]json.RawMessage) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k := range like {
		out[k] = m[k]
	}
	return out
}

// TestNewKeyRecopyReconciles: after a new primary key, records of rows not changed since stay
// under the old key in the compacted topic; a re-copy with the copy strategy (cdc resnapshot)
// reconciles them away, leaving every row once, under its new key.
func TestNewKeyRecopyReconciles(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE nk (id int PRIMARY KEY, a int NOT NULL, b text)`,
		`INSERT INTO nk SELECT g, g % 10, 'b' || g FROM generate_series(1, 300) g`,
	)
	rec := e.recordWatermarks()
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.nk"
	vars["CDC_SNAPSHOT_STRATEGY"] = "copy"
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	vars["CDC_HTTP_TOKEN"] = httpToken
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.nk")
	e.exec(`ALTER TABLE nk DROP CONSTRAINT nk_pkey, ADD PRIMARY KEY (id, a)`,
		`UPDATE nk SET b = 'after' WHERE id % 3 = 0`)
	e.waitFor(p, time.Minute, e.currentLSN(ctx), "public.nk")
	oldKeys := func() (old, total int) {
		for k := range materialize(t, e.readTopic(e.topic("public.nk"))) {
			total++
			if !strings.Contains(k, `"a"`) {
				old++
			}
		}
		return old, total
	}
	old, total := oldKeys()
	t.Logf("after the new key: %d live keys in the topic, %d of them old ones", total, old)
	if old == 0 {
		t.Errorf("no row left under its old key; the test expects the untouched ones there")
	}

	cmd := exec.Command(cdcBinary, "resnapshot", "public.nk")
	cmd.Env = []string{"CDC_HTTP_ADDR=" + vars["CDC_HTTP_ADDR"], "CDC_HTTP_TOKEN=" + httpToken}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cdc resnapshot: %v: %s", err, out)
	}
	rec.first(t, 2*time.Minute, change.ExportID{Schema: "public", Table: "nk"}, "hydrated again", func(r watermark.Record) bool {
		return r.State == watermark.StateHydrated && r.Snapshot != nil && r.Snapshot.Attempt == 2
	})
	e.waitFor(p, time.Minute, e.currentLSN(ctx), "public.nk")
	if old, total := oldKeys(); old != 0 || total != 300 {
		t.Errorf("after the re-copy: %d live keys, %d old ones; want 300 and none", total, old)
	}
	want := e.tableState(`(SELECT id, a, b FROM nk)`, "id")
	got := map[string]map[string]json.RawMessage{}
	for _, row := range materialize(t, e.readTopic(e.topic("public.nk"))) {
		got[compactJSON(t, `{"id":`+string(row["id"])+`}`)] = row
	}
	assertSameState(t, "nk", got, want)
}

// TestKeyLostWhileStopped: a key dropped while Tidemark is stopped is found at start, where the
// table's compacted topic is checked against its key: cdc stops with a message that says what
// to do, instead of publishing records Kafka would refuse.
func TestKeyLostWhileStopped(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(`CREATE TABLE kl (id int PRIMARY KEY, v text)`, `INSERT INTO kl VALUES (1, 'one')`,
		`CREATE TABLE kl_other (id int PRIMARY KEY, v text)`)
	e.exec(`CREATE PUBLICATION ` + e.pub + ` FOR TABLE kl, kl_other`)
	vars := e.baseVars()
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.kl", "public.kl_other")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	e.exec(`ALTER TABLE kl DROP CONSTRAINT kl_pkey`, `ALTER TABLE kl REPLICA IDENTITY FULL`, `INSERT INTO kl VALUES (2, 'two')`)
	p = e.startCDC(vars)
	code := waitExit(t, p, time.Minute)
	out := p.log.String()
	t.Logf("exit %d: %s", code, tail(out, 600))
	if code == 0 || !strings.Contains(out, "has no key") {
		t.Errorf("exit code %d; want non-zero with a message that kl's compacted topic has no key", code)
	}
}
