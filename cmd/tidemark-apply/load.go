package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
	"github.com/tidemark/cdc/pkg/format"
)

// A table that joins (its first copy, or a new one after a re-copy) is loaded into the target
// table in a transaction of its own, on a second connection, that stays open from the load's
// first part to the cut that joins the table: that cut runs in the same transaction and
// commits it. No table is swapped or truncated (neither is MVCC-safe: a reader whose snapshot
// predates the swap would see the table empty or early): the load deletes the old rows and
// writes the new copy with COPY, so until the joining cut commits every reader of the target
// sees the old rows (or none), and from then on the new copy with the cut: never an empty or
// half-copied table, nor one ahead of the others. Meanwhile the cuts of the other tables go
// on, on the first connection. The reader joins the tables whose loads ran at the same time in
// one cut, so one transaction holds them all; a load that will not end (its table left) is
// rolled back with the others, and the session starts again to load those anew. A load
// interrupted by a restart is rolled back with its transaction and starts again from its first
// part. The open transaction holds row locks and the target's vacuum horizon while a large
// table loads.
//
// Old rows and TOAST. In a chunked copy, a key that a change touched while its chunk was read
// is left out of the chunk (the change is newer); when that change is an update that left a
// TOASTed value out, the value is in no record of the new copy, only in the row the target
// already has. So a load into a table with rows keeps them aside first (a temporary copy),
// and an update that leaves values out, finding no row, takes them from the old row (of the
// old key, for a key change). A row that cannot be completed that way (the table was empty,
// or the key is new) stops the load with an error that names it.

// load is one table's load under way.
type load struct {
	t *target
	// old is the temporary table holding the target's rows from before the load (nil when it
	// had none).
	old pgx.Identifier
	// unresolved are keys whose update left values out and found no row to complete, and no
	// full row of them came later (yet).
	unresolved map[string]bool
}

// track notes whether a queued load statement leaves its key's row incomplete.
func (l *load) track(s *step, r *record, p *pending) {
	key := string(s.key)
	switch {
	case s.op == 't' || s.op == 'd' && len(s.newKey) == 0:
	case s.unchanged:
		p.then = func(n int64) {
			if n == 0 {
				l.unresolved[key] = true
			}
		}
	case s.op == 'd':
	default:
		p.then = func(int64) { delete(l.unresolved, key) }
	}
}

// completeSQL is the statement of an update that left columns out, into a re-copied table:
// it sets the columns carried on the row when there is one, and otherwise inserts the row with
// the others taken from the old row (of the old key, for the create of a key change). It
// affects no row when neither exists.
func (l *load) completeSQL(s *step, row map[string]json.RawMessage, r *record, conv func(string, json.RawMessage) (any, error)) (string, []any, error) {
	t := l.t
	var key, oldKey map[string]json.RawMessage
	if err := unmarshalKey(s.key, &key); err != nil {
		return "", nil, fmt.Errorf("read key: %w", err)
	}
	oldKey = key
	if len(s.oldKey) > 0 {
		if err := unmarshalKey(s.oldKey, &oldKey); err != nil {
			return "", nil, fmt.Errorf("read %s header: %w", "tidemark.old_key", err)
		}
	}
	var args []any
	arg := func(col string, raw json.RawMessage) (string, error) {
		v, err := conv(col, raw)
		if err != nil {
			return "", err
		}
		args = append(args, v)
		return param(len(args), t.cols[col]), nil
	}
	var cols, vals, set []string
	for _, c := range t.order {
		q := pgx.Identifier{c}.Sanitize()
		cols = append(cols, q)
		if raw, ok := row[c]; ok {
			p, err := arg(c, raw)
			if err != nil {
				return "", nil, err
			}
			vals = append(vals, p)
			if !slices.Contains(t.key, c) {
				set = append(set, q+" = EXCLUDED."+q)
			}
			continue
		}
		vals = append(vals, "CASE WHEN t.tidemark_here THEN t."+q+" ELSE o."+q+" END")
	}
	var onNew, onOld, conflict []string
	for _, k := range t.key {
		q := pgx.Identifier{k}.Sanitize()
		p, err := arg(k, key[k])
		if err != nil {
			return "", nil, err
		}
		onNew = append(onNew, "x."+q+" = "+p)
		p, err = arg(k, oldKey[k])
		if err != nil {
			return "", nil, err
		}
		onOld = append(onOld, "o."+q+" = "+p)
		conflict = append(conflict, q)
	}
	action := "NOTHING"
	if len(set) > 0 {
		action = "UPDATE SET " + strings.Join(set, ", ")
	}
	sql := "INSERT INTO " + t.name.Sanitize() + " (" + strings.Join(cols, ", ") + ") SELECT " + strings.Join(vals, ", ") +
		" FROM (SELECT 1) one LEFT JOIN (SELECT x.*, true AS tidemark_here FROM " + t.name.Sanitize() + " x WHERE " + strings.Join(onNew, " AND ") + ") t ON true" +
		" LEFT JOIN " + l.old.Sanitize() + " o ON " + strings.Join(onOld, " AND ") +
		" WHERE t.tidemark_here OR o." + conflict[0] + " IS NOT NULL" +
		" ON CONFLICT (" + strings.Join(conflict, ", ") + ") DO " + action
	return sql, args, nil
}

// loadPart applies one part of e's load in the loads' transaction. Runs of copied rows go in
// with COPY; into an empty table, a run that meets a row already there (a change of its key
// that committed before the key's chunk was read) is applied row by row instead.
func (a *applier) loadPart(ctx context.Context, b *batch) (rows int, err error) {
	e := b.load.Export
	if a.ltx == nil {
		if a.loader == nil {
			if a.loader, err = a.dial(ctx); err != nil {
				return 0, fmt.Errorf("connect for the loads: %w", err)
			}
		}
		if a.ltx, err = a.loader.Begin(ctx); err != nil {
			return 0, fmt.Errorf("begin the loads: %w", err)
		}
	}
	tx := a.ltx
	defer func() {
		if err != nil {
			a.abort(ctx)
		}
	}()
	if b.part == 0 || a.loads[e] == nil {
		if err := a.beginLoad(ctx, tx, e, b); err != nil {
			return 0, err
		}
	}
	l := a.loads[e]
	q := &queue{a: a, tx: tx}
	for i := 0; i < len(b.steps); {
		s := &b.steps[i]
		if s.op == 'r' && !s.unchanged {
			j := i + 1
			for j < len(b.steps) && b.steps[j].op == 'r' && !b.steps[j].unchanged {
				j++
			}
			if err := q.flush(ctx); err != nil {
				return 0, err
			}
			copied, err := a.copyRows(ctx, tx, l, b.steps[i:j])
			if err != nil {
				return 0, fmt.Errorf("load %s: %w", e, err)
			}
			if copied {
				rows += j - i
				i = j
				continue
			}
			for ; i < j; i++ {
				n, err := a.loadStep(ctx, q, tx, &b.steps[i])
				if err != nil {
					return 0, err
				}
				rows += n
			}
			continue
		}
		n, err := a.loadStep(ctx, q, tx, s)
		if err != nil {
			return 0, err
		}
		rows += n
		i++
	}
	if err := q.flush(ctx); err != nil {
		return 0, err
	}
	if b.final {
		if err := a.endLoad(ctx, tx, e, l); err != nil {
			return 0, err
		}
	}
	return rows, nil
}

func (a *applier) loadStep(ctx context.Context, q *queue, tx pgx.Tx, s *step) (int, error) {
	t, r, err := a.prepare(ctx, tx, s, true)
	if err != nil {
		return 0, err
	}
	return q.step(ctx, t, s, r, true)
}

// beginLoad starts e's load: it creates the target from the records' schema when it is missing
// and tables may be created, and sets its rows aside (see above) and deletes them.
func (a *applier) beginLoad(ctx context.Context, tx pgx.Tx, e change.ExportID, b *batch) error {
	name := a.targetName(e)
	if err := a.refused(e, name); err != nil {
		return err
	}
	t, ok, err := loadTarget(ctx, tx, name)
	if err != nil {
		return err
	}
	if !ok && a.createTables {
		var r *record
		for i := range b.steps {
			if b.steps[i].op != 't' && len(b.steps[i].schema) > 0 {
				if r, err = decodeRecord(&b.steps[i]); err != nil {
					return fmt.Errorf("record of %s: %w", e, err)
				}
				break
			}
		}
		if r != nil && r.schema != nil {
			if t, err = a.resolve(ctx, tx, e, r); err != nil {
				return err
			}
			ok = t != nil
		}
		if !ok {
			return fmt.Errorf("target table %s does not exist, and the first records of its copy carry no schema to create it from (cdc's CDC_VALUE_FORMAT must be json-with-schema or avro): %w",
				name.Sanitize(), errPermanent)
		}
	}
	if !ok {
		return fmt.Errorf("target table %s does not exist: create it, or set APPLY_CREATE_TABLES=true with json-with-schema or avro: %w",
			name.Sanitize(), errPermanent)
	}
	if len(t.key) == 0 {
		return fmt.Errorf("target %s has no primary key: give it the key of %s: %w", name.Sanitize(), e, errPermanent)
	}
	// Nothing is deleted before the target is known to fit the copy: its key and columns are
	// those of the first record (each record is checked again as it is applied).
	for i := range b.steps {
		if s := &b.steps[i]; s.kind == stepRecord && s.op != 't' {
			r, err := decodeRecord(s)
			if err != nil {
				return fmt.Errorf("record of %s%s: %w", e, s.where(), err)
			}
			if err := t.checkRecord(e, r); err != nil {
				return fmt.Errorf("load of %s%s: %w", e, s.where(), err)
			}
			break
		}
	}
	if prev := a.loads[e]; prev != nil {
		// A new copy attempt while this one loaded: start again, with the rows from before
		// the first attempt still set aside (the table now holds part of that attempt).
		prev.unresolved = map[string]bool{}
		if _, err := tx.Exec(ctx, "DELETE FROM "+name.Sanitize()); err != nil {
			return fmt.Errorf("begin the load of %s again: %w", e, err)
		}
		a.log.Info("loading a table's copy again (a new attempt began)", "export", e.String(), "attempt", b.load.Attempt)
		return nil
	}
	l := &load{t: t, unresolved: map[string]bool{}}
	var rows bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+name.Sanitize()+")").Scan(&rows); err != nil {
		return fmt.Errorf("look into %s: %w", name.Sanitize(), err)
	}
	if rows {
		h := fnv.New32a()
		h.Write([]byte(e.String()))
		l.old = pgx.Identifier{"pg_temp", fmt.Sprintf("tidemark_old_%08x", h.Sum32())}
		keys := make([]string, len(t.key))
		for i, k := range t.key {
			keys[i] = pgx.Identifier{k}.Sanitize()
		}
		for _, sql := range []string{
			"DROP TABLE IF EXISTS " + l.old.Sanitize(),
			"CREATE TEMP TABLE " + pgx.Identifier{l.old[1]}.Sanitize() + " ON COMMIT DROP AS SELECT * FROM " + name.Sanitize(),
			"CREATE UNIQUE INDEX ON " + l.old.Sanitize() + " (" + strings.Join(keys, ", ") + ")",
			"DELETE FROM " + name.Sanitize(),
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("begin the load of %s: %w", e, err)
			}
		}
	}
	if a.loads == nil {
		a.loads = map[change.ExportID]*load{}
	}
	a.loads[e] = l
	a.log.Info("loading a table's copy (readers see the table as it was until it joins)", "export", e.String(), "table", name.Sanitize(), "attempt", b.load.Attempt, "old_rows_kept_aside", rows)
	return nil
}

// endLoad ends e's load: a row it could not complete stops it.
func (a *applier) endLoad(ctx context.Context, tx pgx.Tx, e change.ExportID, l *load) error {
	if len(l.unresolved) == 0 {
		return nil
	}
	keys := make([]string, 0, 3)
	for k := range l.unresolved {
		if len(keys) == cap(keys) {
			break
		}
		keys = append(keys, k)
	}
	return fmt.Errorf("load of %s: %d rows are incomplete (keys %s...): each was changed while cdc's chunked copy read it, by an update that left a TOASTed value out, so no record of the new copy holds its full row, and the target had no row to complete it from; give the source table REPLICA IDENTITY FULL (or run cdc with CDC_SNAPSHOT_STRATEGY=copy) and copy it again: %w",
		e, len(l.unresolved), strings.Join(keys, " "), errPermanent)
}

// copyRows writes copied rows (op r, every column) with one COPY, in a savepoint. ok is false,
// with nothing written, when a row's key is already there (a change that committed before the
// row's chunk was read); the caller applies them one by one then.
func (a *applier) copyRows(ctx context.Context, tx pgx.Tx, l *load, steps []step) (ok bool, err error) {
	t := l.t
	names, buf, ok, err := a.copyText(t, steps)
	if err != nil || !ok {
		return false, err
	}
	cols := make([]string, len(names))
	for i, n := range names {
		cols[i] = pgx.Identifier{n}.Sanitize()
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT tidemark_copy"); err != nil {
		return false, err
	}
	_, err = tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(buf), "COPY "+t.name.Sanitize()+" ("+strings.Join(cols, ", ")+") FROM STDIN")
	if pgErr, isPg := errors.AsType[*pgconn.PgError](err); isPg && dataClass(pgErr.Code) {
		// A row already there (23505), or a value the target refuses: the rows go one by
		// one, which names the record a refusal is about.
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT tidemark_copy"); err != nil {
			return false, err
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("copy: %w", err)
	}
	if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT tidemark_copy"); err != nil {
		return false, err
	}
	for i := range steps {
		delete(l.unresolved, string(steps[i].key))
	}
	return true, nil
}

// copyText renders full rows (every column in after) as COPY text, in the target's column
// order. ok is false when a row does not carry the same columns as the first. The first row is
// checked against the target as a record; the others are scanned in place (no map per row),
// with json-with-schema's field schemas decoded once per schema (a.fieldsOf).
func (a *applier) copyText(t *target, steps []step) (names []string, buf []byte, ok bool, err error) {
	r, err := decodeRecord(&steps[0])
	if err != nil {
		return nil, nil, false, fmt.Errorf("record%s: %w", steps[0].where(), err)
	}
	if err := t.checkRecord(steps[0].export, r); err != nil {
		return nil, nil, false, fmt.Errorf("record%s: %w", steps[0].where(), err)
	}
	if t.pos == nil {
		t.pos = make(map[string]int, len(t.order))
		for i, c := range t.order {
			t.pos[c] = i
		}
	}
	vals := make([]json.RawMessage, len(t.order))
	var present []int // the first row's columns, by position
	var scratch []byte
	for i := range steps {
		s := &steps[i]
		clear(vals)
		n, unknown := 0, false
		if !consumer.Fields(s.after, func(name string, v []byte) {
			j, known := t.pos[name]
			if !known {
				unknown = true
				return
			}
			if vals[j] == nil {
				n++
			}
			vals[j] = v
		}) {
			return nil, nil, false, fmt.Errorf("record%s: after is not a JSON object", s.where())
		}
		if unknown {
			// A column the target lacks: the row-by-row path names it.
			return nil, nil, false, nil
		}
		if present == nil {
			for j, v := range vals {
				if v != nil {
					present = append(present, j)
				}
			}
		}
		if n != len(present) {
			return nil, nil, false, nil
		}
		schema, err := a.schemaOf(s)
		if err != nil {
			return nil, nil, false, fmt.Errorf("record%s: %w", s.where(), err)
		}
		for k, j := range present {
			if k > 0 {
				buf = append(buf, '\t')
			}
			if vals[j] == nil {
				return nil, nil, false, nil
			}
			name := t.order[j]
			var ok bool
			var f format.Field
			if schema != nil {
				f = schema.Field(name)
			}
			if scratch, ok, err = appendText(scratch[:0], vals[j], t.cols[name], f, s.decoder()); err != nil {
				return nil, nil, false, fmt.Errorf("record%s: column %s: %w", s.where(), name, err)
			}
			if !ok {
				buf = append(buf, `\N`...)
				continue
			}
			buf = appendCopyText(buf, scratch)
		}
		buf = append(buf, '\n')
	}
	for _, j := range present {
		names = append(names, t.order[j])
	}
	return names, buf, len(names) > 0, nil
}

// schemaOf returns the schema of s's record (nil for plain json), parsed once per schema.
func (a *applier) schemaOf(s *step) (format.Schema, error) {
	if len(s.schema) == 0 {
		return nil, nil
	}
	if sc, ok := a.schemas[string(s.schema)]; ok {
		return sc, nil
	}
	sc, err := s.decoder().Schema(s.schema)
	if err != nil {
		return nil, err
	}
	if a.schemas == nil || len(a.schemas) >= 64 {
		a.schemas = map[string]format.Schema{}
	}
	a.schemas[string(s.schema)] = sc
	return sc, nil
}

// appendCopyText appends s escaped for COPY's text format.
func appendCopyText[S string | []byte](dst []byte, s S) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// join notes that the cut running in the loads' transaction joins e: its load must be in it.
func (a *applier) join(e change.ExportID) error {
	if a.loads[e] == nil {
		return fmt.Errorf("join %s: its load is not in this transaction (it did not begin, or was rolled back)", e)
	}
	a.joined = append(a.joined, e)
	a.log.Info("table joined: its new copy is visible with this cut", "export", e.String())
	return nil
}
