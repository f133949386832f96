package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
)

// TestApplySemantics applies hand-made cuts to a real PostgreSQL (CDC_TEST_PG_URL) and checks
// the rows after each: a copy loaded beside the table and joined, upserts, an update that
// leaves a TOAST column out, a key change that moves the row, a delete, a truncate, a new
// copy, the progress row; a failing cut leaves nothing.
func TestApplySemantics(t *testing.T) {
	url := testenv.NewDB(t)
	ctx := t.Context()
	testenv.Exec(t, url, `CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL, body text NOT NULL, tags text[], doc jsonb, raw bytea)`)
	conn := testenv.Conn(t, url)
	progress := pgx.Identifier{"public", "tidemark_apply_progress"}
	if err := ensureProgress(ctx, conn, progress); err != nil {
		t.Fatal(err)
	}
	a := &applier{conn: conn, progress: progress, name: "test", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		tables: map[change.ExportID]*target{}, chunk: 2, dial: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }}
	t.Cleanup(func() { a.close(context.Background()) })
	e := change.ExportID{Schema: "public", Table: "t"}
	rec := func(op byte, key, before, after string) step {
		s := step{kind: stepRecord, export: e, op: op, key: json.RawMessage(key)}
		if before != "" {
			s.before = json.RawMessage(before)
		}
		if after != "" {
			s.after = json.RawMessage(after)
		}
		return s
	}
	dump := func() string {
		t.Helper()
		var s string
		if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(format('%s|%s|%s|%s|%s|%s', id, n, length(body), tags, doc, encode(raw, 'hex')), ' ; ' ORDER BY id), '') FROM t`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	apply := func(lsn change.LSN, txns int, steps ...step) error {
		_, err := a.apply(ctx, &batch{lsn: lsn, position: `{"lsn":"` + lsn.String() + `"}`, txns: txns, steps: steps, final: true})
		return err
	}
	load := func(steps ...step) {
		t.Helper()
		if _, err := a.apply(ctx, &batch{load: &consumer.Load{Export: e, Done: true}, final: true, steps: steps}); err != nil {
			t.Fatalf("load: %v", err)
		}
	}
	long := `"` + strings.Repeat("x", 70) + `"`
	steps := []struct {
		name  string
		lsn   change.LSN
		steps []step
		want  string
	}{
		{"copy", 10, []step{
			{kind: stepJoin, export: e},
			rec('r', `{"id":1}`, "", `{"id":1,"n":1,"body":`+long+`,"tags":["a","b c"],"doc":{"k":[1,2]},"raw":"AQI="}`),
			rec('r', `{"id":2}`, "", `{"id":2,"n":2,"body":"two","tags":null,"doc":null,"raw":null}`),
		}, `1|1|70|{a,"b c"}|{"k": [1, 2]}|0102 ; 2|2|3|||`},
		{"update without the TOAST column", 20, []step{
			func() step {
				s := rec('u', `{"id":1}`, "", `{"id":1,"n":11,"tags":[],"doc":"s","raw":null}`)
				s.unchanged = true
				return s
			}(),
		}, `1|11|70|{}|"s"| ; 2|2|3|||`},
		{"key change keeps the TOAST column", 30, []step{
			func() step {
				s := rec('d', `{"id":1}`, `{"id":1}`, "")
				s.newKey = json.RawMessage(`{"id":5}`)
				return s
			}(),
			func() step { s := rec('c', `{"id":5}`, "", `{"id":5,"n":-11}`); s.unchanged = true; return s }(),
		}, `2|2|3||| ; 5|-11|70|{}|"s"|`},
		{"delete, insert", 40, []step{
			rec('d', `{"id":2}`, `{"id":2,"n":null,"body":null}`, ""),
			rec('c', `{"id":3}`, "", `{"id":3,"n":3,"body":"three"}`),
		}, `3|3|5||| ; 5|-11|70|{}|"s"|`},
		{"truncate, insert", 50, []step{
			rec('t', `{}`, "", ""),
			rec('c', `{"id":4}`, "", `{"id":4,"n":4,"body":"four"}`),
		}, `4|4|4|||`},
		{"reset and copy", 60, []step{
			{kind: stepJoin, export: e},
			rec('r', `{"id":9}`, "", `{"id":9,"n":9,"body":"nine"}`),
		}, `9|9|4|||`},
	}
	for i, s := range steps {
		if s.steps[0].kind == stepJoin {
			// The copy is loaded beside the table first, then joined by the cut.
			load(s.steps[1:]...)
			s.steps = s.steps[:1]
		}
		if err := apply(s.lsn, i, s.steps...); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := dump(); got != s.want {
			t.Errorf("after %s: %s\nwant %s", s.name, got, s.want)
		}
	}
	// A cut that fails half-way applies nothing, progress included.
	err := apply(70, 100,
		rec('c', `{"id":10}`, "", `{"id":10,"n":10,"body":"ten"}`),
		func() step { s := rec('u', `{"id":99}`, "", `{"id":99,"n":1}`); s.unchanged = true; return s }())
	if !errors.Is(err, errPermanent) {
		t.Errorf("update of a missing row: %v, want a permanent error", err)
	}
	if got := dump(); got != `9|9|4|||` {
		t.Errorf("after the failed cut: %s", got)
	}
	p, found, err := readProgress(ctx, conn, progress, "test")
	if err != nil || !found {
		t.Fatalf("progress: %v %v", found, err)
	}
	if p.lsn != change.LSN(60).String() || p.txns != 0+1+2+3+4+5 {
		t.Errorf("progress %+v, want lsn %s and 15 transactions", p, change.LSN(60))
	}
	// A missing column is a permanent error naming it.
	a.tables = nil
	err = apply(80, 1, rec('c', `{"id":11}`, "", `{"id":11,"n":1,"body":"x","extra":1}`))
	if !errors.Is(err, errPermanent) {
		t.Errorf("a column the target lacks: %v, want a permanent error", err)
	}
}

// TestLoadAndJoin: a joining table's copy is loaded part by part in a transaction that the
// joining cut commits: readers of the target see the old rows until then, then the new copy
// with the cut. A load tolerates an update whose row comes later in the copy (a chunked copy
// reads a key after changes to it), and a copied row whose key is already there. A cut's
// parts are one transaction; a failed one rolls the loads back too. A table that leaves while
// loading rolls every load back (errReload).
func TestLoadAndJoin(t *testing.T) {
	url := testenv.NewDB(t)
	ctx := t.Context()
	testenv.Exec(t, url, `CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL, note text)`,
		`INSERT INTO t VALUES (100, 100, 'old')`, `CREATE TABLE u (id int PRIMARY KEY)`, `CREATE VIEW v AS SELECT id FROM t`)
	conn := testenv.Conn(t, url)
	progress := pgx.Identifier{"public", "tidemark_apply_progress"}
	if err := ensureProgress(ctx, conn, progress); err != nil {
		t.Fatal(err)
	}
	a := &applier{conn: conn, progress: progress, name: "test", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		tables: map[change.ExportID]*target{}, chunk: 3, dial: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }}
	t.Cleanup(func() { a.close(context.Background()) })
	e, u := change.ExportID{Schema: "public", Table: "t"}, change.ExportID{Schema: "public", Table: "u"}
	rec := func(op byte, key, after string) step {
		s := step{kind: stepRecord, export: e, op: op, key: json.RawMessage(key)}
		if after != "" {
			s.after = json.RawMessage(after)
		}
		if op == 'd' {
			s.before = json.RawMessage(key)
		}
		return s
	}
	dumpOn := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var s string
		if err := q.QueryRow(ctx, `SELECT coalesce(string_agg(format('%s|%s|%s', id, n, note), ' ; ' ORDER BY id), '') FROM t`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	dump := func() string { t.Helper(); return dumpOn(conn) }
	part := func(b *batch) error {
		_, err := a.apply(ctx, b)
		return err
	}
	toast := func(s step) step { s.unchanged = true; return s }
	ld := func(e change.ExportID, n int, final bool, steps ...step) {
		t.Helper()
		if err := part(&batch{load: &consumer.Load{Export: e, Done: final}, part: n, final: final, steps: steps}); err != nil {
			t.Fatalf("load part %d: %v", n, err)
		}
	}
	ld(e, 0, false,
		toast(rec('u', `{"id":1}`, `{"id":1,"n":10}`)), // its row comes later in the copy
		rec('r', `{"id":2}`, `{"id":2,"n":2,"note":"two"}`),
		rec('r', `{"id":3}`, `{"id":3,"n":3,"note":"three"}`))
	ld(e, 1, true,
		rec('c', `{"id":4}`, `{"id":4,"n":4,"note":"new"}`),
		rec('r', `{"id":1}`, `{"id":1,"n":10,"note":"one"}`),
		rec('r', `{"id":4}`, `{"id":4,"n":44,"note":"copied"}`), // its key is there: row by row
		rec('d', `{"id":3}`, ""))
	if got := dump(); got != "100|100|old" {
		t.Fatalf("the target during the load: %s", got)
	}
	if got := dumpOn(a.ltx); got != "1|10|one ; 2|2|two ; 4|44|copied" {
		t.Fatalf("the load's transaction after the load: %s", got)
	}
	// A cut in two parts joins it; the second part fails: nothing of it, nor of the load.
	if err := part(&batch{lsn: 10, part: 0, steps: []step{{kind: stepJoin, export: e}, rec('c', `{"id":5}`, `{"id":5,"n":5}`)}}); err != nil {
		t.Fatal(err)
	}
	err := part(&batch{lsn: 10, part: 1, final: true, position: "{}", txns: 1, steps: []step{toast(rec('u', `{"id":99}`, `{"id":99,"n":1}`))}})
	if !errors.Is(err, errPermanent) {
		t.Fatalf("an update of a missing row in a cut: %v, want a permanent error", err)
	}
	if got := dump(); got != "100|100|old" || a.ltx != nil {
		t.Fatalf("the target after a failed cut: %s (loads' transaction %v)", got, a.ltx)
	}
	// The load again (a restart starts it over), and the join: the copy and the cut at once.
	ld(e, 0, true, rec('r', `{"id":1}`, `{"id":1,"n":1,"note":"one"}`), rec('r', `{"id":2}`, `{"id":2,"n":2,"note":"two"}`))
	if err := part(&batch{lsn: 10, part: 0, steps: []step{{kind: stepJoin, export: e}}}); err != nil {
		t.Fatal(err)
	}
	if got := dump(); got != "100|100|old" {
		t.Fatalf("the target before the joining cut's last part: %s", got)
	}
	if err := part(&batch{lsn: 10, part: 1, final: true, position: "{}", txns: 1, steps: []step{rec('c', `{"id":5}`, `{"id":5,"n":5}`)}}); err != nil {
		t.Fatal(err)
	}
	if got := dump(); got != "1|1|one ; 2|2|two ; 5|5|" {
		t.Fatalf("the target after the join: %s", got)
	}
	var views int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM v`).Scan(&views); err != nil || views != 3 {
		t.Fatalf("the view after the join: %d rows, %v", views, err)
	}
	// t is copied again while u loads too; u leaves before it joins: every load is rolled back.
	ld(e, 0, true, rec('r', `{"id":7}`, `{"id":7,"n":7,"note":"seven"}`))
	ld(u, 0, false, step{kind: stepRecord, export: u, op: 'r', key: json.RawMessage(`{"id":1}`), after: json.RawMessage(`{"id":1}`)})
	err = part(&batch{lsn: 20, part: 0, final: true, position: "{}", steps: []step{{kind: stepJoin, export: e}}})
	if !errors.Is(err, errReload) {
		t.Fatalf("a join that leaves another load behind: %v, want errReload", err)
	}
	if got := dump(); got != "1|1|one ; 2|2|two ; 5|5|" || a.ltx != nil {
		t.Fatalf("the target after the loads were rolled back: %s", got)
	}
	// A re-copy whose chunks left out keys that updates leaving the note out touched: their
	// rows are completed from the old rows (of the old key, for a key change).
	moveDel := rec('d', `{"id":1}`, "")
	moveDel.newKey = json.RawMessage(`{"id":10}`)
	moveNew := toast(rec('c', `{"id":10}`, `{"id":10,"n":11}`))
	moveNew.oldKey = json.RawMessage(`{"id":1}`)
	ld(e, 0, true, rec('r', `{"id":7}`, `{"id":7,"n":7,"note":"seven"}`), toast(rec('u', `{"id":2}`, `{"id":2,"n":22}`)), moveDel, moveNew)
	if err := part(&batch{lsn: 20, part: 0, final: true, position: "{}", steps: []step{{kind: stepJoin, export: e}}}); err != nil {
		t.Fatal(err)
	}
	if got := dump(); got != "2|22|two ; 7|7|seven ; 10|11|one" {
		t.Fatalf("the target after the second join: %s", got)
	}
	// A new attempt while one loads starts the load again, the rows from before the first
	// attempt still set aside: 10 is completed from its original row.
	ld(e, 0, false, rec('r', `{"id":2}`, `{"id":2,"n":2,"note":"two again"}`))
	ld(e, 0, true, toast(rec('u', `{"id":10}`, `{"id":10,"n":100}`)))
	if err := part(&batch{lsn: 30, part: 0, final: true, position: "{}", steps: []step{{kind: stepJoin, export: e}}}); err != nil {
		t.Fatal(err)
	}
	if got := dump(); got != "10|100|one" {
		t.Fatalf("the target after a load begun again: %s", got)
	}
	// Into an empty table, an update that left a value out and found no row, with no full row
	// of its key later in the copy, cannot be completed: the load stops and says why.
	testenv.Exec(t, url, `DELETE FROM t`)
	err = part(&batch{load: &consumer.Load{Export: e, Done: true}, final: true, steps: []step{
		toast(rec('u', `{"id":8}`, `{"id":8,"n":8}`)), rec('r', `{"id":9}`, `{"id":9,"n":9,"note":"nine"}`)}})
	if !errors.Is(err, errPermanent) || !strings.Contains(err.Error(), `{"id":8}`) || !strings.Contains(err.Error(), "REPLICA IDENTITY FULL") {
		t.Fatalf("a load with a row it cannot complete: %v", err)
	}
}

// TestProgressTableConcurrently: appliers starting at once create the progress table without
// colliding (on c9cb695 the second failed on pg_type_typname_nsp_index and restarted).
func TestProgressTableConcurrently(t *testing.T) {
	url := testenv.NewDB(t)
	ctx := t.Context()
	for round := range 5 {
		table := pgx.Identifier{"s" + strconv.Itoa(round), "progress"}
		errs := make(chan error, 4)
		for range 4 {
			go func() {
				conn, err := pgx.Connect(ctx, url)
				if err != nil {
					errs <- err
					return
				}
				defer conn.Close(context.Background())
				errs <- ensureProgress(ctx, conn, table)
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// TestUpsertRuns: a cut's runs of full rows with distinct keys go in with COPY and one INSERT
// ... ON CONFLICT; a repeated key ends a run, a run repeated in one transaction reuses its
// staging table, and the rows are what applying them one by one gives.
func TestUpsertRuns(t *testing.T) {
	url := testenv.NewDB(t)
	ctx := t.Context()
	testenv.Exec(t, url, `CREATE TABLE r (id int PRIMARY KEY, n int NOT NULL, s text)`, `INSERT INTO r VALUES (5, 0, 'old')`)
	conn := testenv.Conn(t, url)
	progress := pgx.Identifier{"public", "tidemark_apply_progress"}
	if err := ensureProgress(ctx, conn, progress); err != nil {
		t.Fatal(err)
	}
	a := &applier{conn: conn, progress: progress, name: "test", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		tables: map[change.ExportID]*target{}, chunk: 64}
	e := change.ExportID{Schema: "public", Table: "r"}
	var steps []step
	row := func(op byte, id, n int) step {
		return step{kind: stepRecord, export: e, op: op, key: json.RawMessage(fmt.Sprintf(`{"id":%d}`, id)),
			after: json.RawMessage(fmt.Sprintf(`{"id":%d,"n":%d,"s":"tab\there \\ and\nnewline"}`, id, n))}
	}
	for i := range 100 {
		steps = append(steps, row('c', i, i))
	}
	steps = append(steps, row('u', 7, 70)) // repeats a key: a new run begins
	for i := range 40 {
		steps = append(steps, row('u', i, -i))
	}
	for _, final := range []bool{false, true} {
		part := 0
		if final {
			part = 1
		}
		if _, err := a.apply(ctx, &batch{lsn: 10, part: part, final: final, position: "{}", steps: steps}); err != nil {
			t.Fatal(err)
		}
	}
	var n, sum int
	var s string
	if err := conn.QueryRow(ctx, `SELECT count(*), sum(n), min(s) FROM r`).Scan(&n, &sum, &s); err != nil {
		t.Fatal(err)
	}
	// ids 0..39 end at -id, 40..99 at id (7 was 70, then -7).
	want := 0
	for i := range 100 {
		if i < 40 {
			want -= i
		} else {
			want += i
		}
	}
	if n != 100 || sum != want || s != "tab\there \\ and\nnewline" {
		t.Fatalf("%d rows, sum %d (want 100, %d), s %q", n, sum, want, s)
	}
}
