package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
)

// hostileApplier is an applier on a fresh database of the test PostgreSQL.
func hostileApplier(t *testing.T, ddl string) (*applier, string) {
	t.Helper()
	url := testenv.NewDB(t)
	if ddl != "" {
		testenv.Exec(t, url, ddl)
	}
	conn := testenv.Conn(t, url)
	progress := pgx.Identifier{"public", "tidemark_apply_progress"}
	if err := ensureProgress(t.Context(), conn, progress); err != nil {
		t.Fatal(err)
	}
	a := &applier{conn: conn, progress: progress, name: "test", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		tables: map[change.ExportID]*target{}, chunk: 8, dial: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }}
	t.Cleanup(func() { a.close(context.Background()) })
	return a, url
}

// hrec is a record step of e at offset off of partition 0 of topic "t.<table>".
func hrec(e change.ExportID, off int64, op byte, key, after string) step {
	s := step{kind: stepRecord, export: e, op: op, key: json.RawMessage(key), topic: "t." + e.Table, offset: off}
	if after != "" {
		s.after = json.RawMessage(after)
	}
	if op == 'd' {
		s.before = json.RawMessage(key)
	}
	return s
}

func count(t *testing.T, url, sql string) int {
	t.Helper()
	var n int
	if err := testenv.Conn(t, url).QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRefusedTargets: records that name a system table, the progress table, a keyless table
// or a table whose columns do not fit change nothing, and say why. On c9cb695 a load of
// pg_catalog.pg_description, of a keyless table and of the progress table emptied them.
func TestRefusedTargets(t *testing.T) {
	a, url := hostileApplier(t, `CREATE TABLE victim (v text); INSERT INTO victim VALUES ('a'), ('b');
CREATE TABLE narrow (id int PRIMARY KEY, v text); INSERT INTO narrow VALUES (1, 'x')`)
	ctx := t.Context()
	testenv.Exec(t, url, `INSERT INTO tidemark_apply_progress (name, lsn, position, txns, applied_at) VALUES ('other', '0/1', '{}', 1, now())`)
	descriptions := count(t, url, `SELECT count(*) FROM pg_catalog.pg_description`)
	load := func(e change.ExportID, steps ...step) error {
		defer a.abort(ctx)
		_, err := a.apply(ctx, &batch{load: &consumer.Load{Export: e, Done: true}, final: true, steps: steps})
		return err
	}
	cases := []struct {
		e    change.ExportID
		rec  step
		want string
	}{
		{change.ExportID{Schema: "pg_catalog", Table: "pg_description"}, step{}, "in a system schema: refused"},
		{change.ExportID{Schema: "public", Table: "tidemark_apply_progress"}, step{}, "the applier's progress table: refused"},
		{change.ExportID{Schema: "public", Table: "victim"}, step{}, "has no primary key"},
		{change.ExportID{Schema: "public", Table: "narrow"}, hrec(change.ExportID{Schema: "public", Table: "narrow"}, 3, 'r', `{"id":2}`, `{"id":2,"v":"y","ghost":1}`), "has no column ghost"},
		{change.ExportID{Schema: "public", Table: "narrow"}, hrec(change.ExportID{Schema: "public", Table: "narrow"}, 4, 'r', `{"v":"y"}`, `{"id":2,"v":"y"}`), "primary key (id) is not public.narrow's key (v)"},
	}
	for _, c := range cases {
		var steps []step
		if c.rec.kind == stepRecord && c.rec.topic != "" {
			steps = append(steps, c.rec)
		}
		err := load(c.e, steps...)
		if !errors.Is(err, errPermanent) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("load of %s: %v, want a permanent error saying %q", c.e, err, c.want)
		}
		if c.rec.topic != "" {
			continue
		}
		// A truncate is refused the same way.
		err = func() error {
			defer a.abort(ctx)
			_, err := a.apply(ctx, &batch{lsn: 10, final: true, steps: []step{hrec(c.e, 9, 't', `{}`, "")}})
			return err
		}()
		if !errors.Is(err, errPermanent) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("truncate of %s: %v, want a permanent error saying %q", c.e, err, c.want)
		}
	}
	if n := count(t, url, `SELECT count(*) FROM pg_catalog.pg_description`); n != descriptions {
		t.Errorf("pg_description has %d rows, had %d", n, descriptions)
	}
	for table, want := range map[string]int{"victim": 2, "narrow": 1, "tidemark_apply_progress": 1} {
		if n := count(t, url, "SELECT count(*) FROM "+table); n != want {
			t.Errorf("%s has %d rows, want %d (untouched)", table, n, want)
		}
	}
}

// TestDataRefusedNamed: a value that does not fit its column is refused by PostgreSQL (the
// cast no longer carries the column's length, so it does not cut it), as a permanent error
// naming the record and APPLY_SKIP_RECORDS, whichever path applies it: a statement, a run of
// upserts, a load's COPY. On c9cb695 "Ada Lovelace" went into varchar(3) as "Ada".
func TestDataRefusedNamed(t *testing.T) {
	a, url := hostileApplier(t, `CREATE TABLE p (id int PRIMARY KEY, name varchar(3), flags bit(3), code char(3), n numeric(4,1))`)
	ctx := t.Context()
	e := change.ExportID{Schema: "public", Table: "p"}
	row := func(off int64, id int, name string) step {
		return hrec(e, off, 'c', fmt.Sprintf(`{"id":%d}`, id), fmt.Sprintf(`{"id":%d,"name":%q,"flags":"101","code":"ab","n":"12.3"}`, id, name))
	}
	apply := func(steps ...step) error {
		_, err := a.apply(ctx, &batch{lsn: 10, position: `{}`, final: true, steps: steps})
		return err
	}
	if err := apply(row(1, 1, "Ada")); err != nil {
		t.Fatalf("a value that fits: %v", err)
	}
	var got string
	if err := testenv.Conn(t, url).QueryRow(ctx, `SELECT format('%s|%s|%s|%s', name, flags, code, n) FROM p`).Scan(&got); err != nil || got != "Ada|101|ab |12.3" {
		t.Fatalf("row %q (%v), want Ada|101|ab |12.3", got, err)
	}
	check := func(what string, err error, ref string) {
		t.Helper()
		if !errors.Is(err, errPermanent) || !strings.Contains(err.Error(), "PostgreSQL refused the data of record "+ref) ||
			!strings.Contains(err.Error(), "APPLY_SKIP_RECORDS="+ref) || !strings.Contains(err.Error(), "SQLSTATE 22001") {
			t.Errorf("%s: %v\nwant a permanent error naming record %s (22001)", what, err, ref)
		}
	}
	check("one statement", apply(row(2, 2, "Ada Lovelace")), "t.p:0:2")
	var run []step
	for i := range 40 {
		name := "ok"
		if i == 25 {
			name = "Ada Lovelace"
		}
		run = append(run, row(int64(100+i), 100+i, name))
	}
	check("a run of upserts", apply(run...), "t.p:0:125")
	loadRows := make([]step, 0, 40)
	for _, s := range run {
		s.op = 'r'
		loadRows = append(loadRows, s)
	}
	_, err := a.apply(ctx, &batch{load: &consumer.Load{Export: e, Done: true}, final: true, steps: loadRows})
	a.abort(ctx)
	check("a load's COPY", err, "t.p:0:125")
	if n := count(t, url, `SELECT count(*) FROM p`); n != 1 {
		t.Errorf("p has %d rows, want 1: a refused cut or load applies nothing", n)
	}
	// APPLY_SKIP_RECORDS passes over the record named, and the rest applies.
	a.skip = map[recordRef]bool{{"t.p", 0, 125}: true}
	if err := apply(run...); err != nil {
		t.Fatalf("with the record skipped: %v", err)
	}
	if n := count(t, url, `SELECT count(*) FROM p`); n != 40 {
		t.Errorf("p has %d rows, want 40 (1 + 39)", n)
	}
	// A record with a column the target lacks is refused even after the table's first record
	// (on c9cb695 only a session's first record was checked).
	err = apply(hrec(e, 300, 'c', `{"id":300}`, `{"id":300,"name":"x"}`), hrec(e, 301, 'c', `{"id":301}`, `{"id":301,"name":"y","ghost":true}`))
	if !errors.Is(err, errPermanent) || !strings.Contains(err.Error(), "has no column ghost") || !strings.Contains(err.Error(), "t.p[0]@301") {
		t.Errorf("a second record with a column the target lacks: %v", err)
	}
}

// TestStatementCacheBounded: records with ever new column sets do not grow the statements
// cached for a table without bound.
func TestStatementCacheBounded(t *testing.T) {
	var cols []string
	for i := range 12 {
		cols = append(cols, fmt.Sprintf("c%d int", i))
	}
	a, _ := hostileApplier(t, `CREATE TABLE w (id int PRIMARY KEY, `+strings.Join(cols, ", ")+`)`)
	e := change.ExportID{Schema: "public", Table: "w"}
	for i := range 300 {
		var fields []string
		for c := range 12 {
			if i>>(c%9)&1 == 1 || c == i%12 {
				fields = append(fields, fmt.Sprintf(`"c%d":%d`, c, i))
			}
		}
		s := hrec(e, int64(i), 'c', fmt.Sprintf(`{"id":%d}`, i), fmt.Sprintf(`{"id":%d,%s}`, i, strings.Join(fields, ",")))
		if _, err := a.apply(t.Context(), &batch{lsn: change.LSN(i + 1), position: `{}`, final: true, steps: []step{s}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(a.tables[e].sql); n > maxStatements {
		t.Errorf("%d statements cached, want at most %d", n, maxStatements)
	}
}
