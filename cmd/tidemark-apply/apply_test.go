package main

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/integration/testenv"
	"github.com/tidemark/cdc/pkg/change"
)

// TestApplySemantics applies hand-made cuts to a real PostgreSQL (CDC_TEST_PG_URL) and checks
// the rows after each: upserts, an update that leaves a TOAST column out, a key change that
// moves the row, a delete, a truncate, a reset, the progress row; a failing cut leaves nothing.
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
		tables: map[change.ExportID]*target{}, chunk: 2}
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
		_, err := a.apply(ctx, &batch{lsn: lsn, position: `{"lsn":"` + lsn.String() + `"}`, txns: txns, steps: steps})
		return err
	}
	long := `"` + strings.Repeat("x", 70) + `"`
	steps := []struct {
		name  string
		lsn   change.LSN
		steps []step
		want  string
	}{
		{"copy", 10, []step{
			{kind: stepReset, export: e},
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
			{kind: stepReset, export: e},
			rec('r', `{"id":9}`, "", `{"id":9,"n":9,"body":"nine"}`),
		}, `9|9|4|||`},
	}
	for i, s := range steps {
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
