package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
	"github.com/tidemark/cdc/pkg/format"
)

// applier applies batches to the target: a cut's parts in one transaction, with its progress
// row; each part of a table's load in a transaction of its own, into the table's shadow.
type applier struct {
	conn         *pgx.Conn
	progress     pgx.Identifier
	name         string
	targetSchema string // "" keeps each table's source schema
	createTables bool
	log          *slog.Logger
	tables       map[change.ExportID]*target
	// loads are the tables whose loads are under way in the loads' transaction.
	loads map[change.ExportID]*load
	// chunk is how many statements go to the server in one round trip.
	chunk int
	// tx is the transaction of the cut whose parts are being applied (nil between cuts);
	// joined are the tables it joined so far.
	tx     pgx.Tx
	joined []change.ExportID
	// dial opens the loads' connection; loader is it, and ltx its transaction, open from the
	// first load part until the cut that joins the loaded tables commits (load.go).
	dial   func(ctx context.Context) (*pgx.Conn, error)
	loader *pgx.Conn
	ltx    pgx.Tx
	// stages are the temporary tables of upsert runs, per connection and table (upsert.go).
	stages   map[*pgx.Conn]map[*target]pgx.Identifier
	stageSeq int
	// stageTx is the transaction staged names the staging tables already used in.
	stageTx pgx.Tx
	staged  map[string]bool
	// schemas are decoded record schemas (json-with-schema's Connect schema, avro's schema id), by
	// their bytes (a few).
	schemas map[string]format.Schema
	// skip are the records APPLY_SKIP_RECORDS passes over.
	skip map[recordRef]bool
	// stopWait bounds a rollback or close (APPLY_RECEIVE_TIMEOUT; 0: its default).
	stopWait time.Duration
}

// errReload: a table left while its load was under way, in the loads' transaction with the
// others': every load was rolled back, and the session starts again to load them anew.
var errReload = errors.New("loads rolled back: reading them again")

// pending is a queued statement and what its result must be.
type pending struct {
	want   int64 // rows it must affect; -1 for any
	export change.ExportID
	what   string
	at     string    // the record it applies: topic[partition]@offset and key
	ref    recordRef // the record, for a data error (topic "" for none)
	// then, when set, is told how many rows the statement affected.
	then func(rows int64)
}

// targetName is the target table of an export.
func (a *applier) targetName(e change.ExportID) pgx.Identifier {
	if a.targetSchema != "" {
		return pgx.Identifier{a.targetSchema, e.Table}
	}
	return pgx.Identifier{e.Schema, e.Table}
}

// apply applies b: a part of a table's load in its own transaction, or a part of a cut in the
// cut's transaction (begun by part 0, committed with the progress row by the final part). It
// returns the row changes applied. On error the cut's transaction is rolled back: nothing of
// the cut is applied.
func (a *applier) apply(ctx context.Context, b *batch) (rows int, err error) {
	if len(a.skip) > 0 {
		b.steps = a.skipped(b.steps)
	}
	if b.load != nil {
		return a.loadPart(ctx, b)
	}
	if b.part == 0 {
		if a.tx != nil {
			return 0, fmt.Errorf("cut %s begins before the last one ended", b.lsn)
		}
		if b.joins() {
			// The cut that joins tables runs in the loads' transaction: the loaded rows
			// become visible with it, to every snapshot that sees the cut, and no older one.
			if a.ltx == nil {
				return 0, fmt.Errorf("cut %s joins a table whose load is not under way", b.lsn)
			}
			a.tx = a.ltx
		} else if a.tx, err = a.conn.Begin(ctx); err != nil {
			return 0, fmt.Errorf("begin: %w", err)
		}
	} else if a.tx == nil {
		return 0, fmt.Errorf("part %d of cut %s without its beginning", b.part, b.lsn)
	}
	defer func() {
		if err != nil {
			a.abort(ctx)
		}
	}()
	q := &queue{a: a, tx: a.tx}
	// runsFrom: a run that went back to row by row (its columns differ, or the target
	// refused a value) is not tried again from inside it.
	runsFrom := 0
	for i := 0; i < len(b.steps); i++ {
		s := &b.steps[i]
		if j := upsertRun(b.steps, i); j > i && i >= runsFrom {
			t, _, err := a.prepare(ctx, a.tx, s, false)
			if err != nil {
				return 0, err
			}
			if err := q.flush(ctx); err != nil {
				return 0, err
			}
			done, err := a.upsertRows(ctx, a.tx, t, b.steps[i:j])
			if err != nil {
				return 0, err
			}
			if done {
				rows += j - i
				i = j - 1
				continue
			}
			runsFrom = j
		}
		if s.kind == stepJoin {
			if err := q.flush(ctx); err != nil {
				return 0, err
			}
			if err := a.join(s.export); err != nil {
				return 0, err
			}
			continue
		}
		t, r, err := a.prepare(ctx, a.tx, s, false)
		if err != nil || t == nil {
			return 0, err
		}
		n, err := q.step(ctx, t, s, r, false)
		if err != nil {
			return 0, err
		}
		rows += n
	}
	if !b.final {
		return rows, q.flush(ctx)
	}
	q.pb.Queue(fmt.Sprintf(`INSERT INTO %s (name, lsn, position, txns, applied_at) VALUES ($1, $2, $3, $4, now())
ON CONFLICT (name) DO UPDATE SET lsn = EXCLUDED.lsn, position = EXCLUDED.position,
  txns = %[1]s.txns + EXCLUDED.txns, applied_at = EXCLUDED.applied_at`, a.progress.Sanitize()),
		a.name, b.lsn.String(), b.position, b.txns)
	q.want = append(q.want, pending{want: 1, what: "record progress"})
	if err := q.flush(ctx); err != nil {
		return 0, err
	}
	if a.tx == a.ltx {
		for e := range a.loads {
			if !slices.Contains(a.joined, e) {
				// A load that this cut does not join (its table left meanwhile) cannot become
				// visible: roll every load back, and the cut with them, and load again.
				a.abort(ctx)
				return 0, fmt.Errorf("%w: %s", errReload, e)
			}
		}
	}
	tx := a.tx
	a.tx, a.joined = nil, nil
	if tx == a.ltx {
		a.ltx, a.loads = nil, nil
	}
	if err := tx.Commit(ctx); err != nil {
		a.tables, a.loads = nil, nil
		return 0, fmt.Errorf("commit cut %s: %w", b.lsn, err)
	}
	for _, e := range b.gone {
		if a.loads[e] != nil {
			// Its load will not end; it is in the loads' transaction with the others'.
			a.abort(ctx)
			return rows, fmt.Errorf("%w: %s left while loading", errReload, e)
		}
	}
	return rows, nil
}

// abort rolls the cut's transaction back, and the loads' (a failed cut may have run in it):
// loads start again with the session. Cached tables may have been created or swapped in them,
// so they are read again.
func (a *applier) abort(ctx context.Context) {
	ctx, cancel := a.bounded(ctx)
	defer cancel()
	if a.tx != nil {
		_ = a.tx.Rollback(ctx)
		a.tx = nil
	}
	if a.ltx != nil {
		_ = a.ltx.Rollback(ctx)
		a.ltx = nil
	}
	a.tables, a.loads, a.joined, a.stages = nil, nil, nil, nil
}

// close aborts what is open and closes the loads' connection.
func (a *applier) close(ctx context.Context) {
	a.abort(ctx)
	if a.loader != nil {
		ctx, cancel := a.bounded(ctx)
		defer cancel()
		_ = a.loader.Close(ctx)
		a.loader = nil
	}
}

// bounded is a context for a rollback or a close that must happen even when ctx ended (a
// stop), bounded by the receive timeout: on a dead path, pgx gives up and closes the socket
// then, instead of waiting for ever.
func (a *applier) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	d := a.stopWait
	if d <= 0 {
		d = defaultReceiveTimeout
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// prepare decodes a step's record and finds its table (the target, or the shadow when
// loading). It returns a nil table for a truncate repeated on another partition.
func (a *applier) prepare(ctx context.Context, tx pgx.Tx, s *step, loading bool) (*target, *record, error) {
	r, err := decodeRecord(s)
	if err != nil {
		return nil, nil, fmt.Errorf("record of %s: %w", s.export, err)
	}
	var t *target
	if loading {
		l := a.loads[s.export]
		if l == nil {
			return nil, nil, fmt.Errorf("load of %s: its first part was not applied", s.export)
		}
		t = l.t
		return t, r, nil
	}
	if t, err = a.resolve(ctx, tx, s.export, r); err != nil {
		return nil, nil, err
	}
	if t == nil && a.createTables {
		return nil, nil, fmt.Errorf("target table %s does not exist, and its records carry no schema to create it from (cdc's CDC_VALUE_FORMAT must be json-with-schema or avro): %w",
			a.targetName(s.export).Sanitize(), errPermanent)
	}
	if t == nil {
		return nil, nil, fmt.Errorf("target table %s does not exist: create it, or set APPLY_CREATE_TABLES=true with json-with-schema or avro: %w",
			a.targetName(s.export).Sanitize(), errPermanent)
	}
	return t, r, nil
}

// queue sends statements to the server in pipelined batches of a.chunk and checks their
// results.
type queue struct {
	a    *applier
	tx   pgx.Tx
	pb   pgx.Batch
	want []pending
	// lastTruncate: cdc writes a truncate to every partition; the reader delivers it once, and
	// this keeps a repeat from truncating twice.
	lastTruncate truncation
}

type truncation struct {
	export   change.ExportID
	lsn      change.LSN
	sequence int64
}

func (q *queue) flush(ctx context.Context) error {
	if q.pb.Len() == 0 {
		return nil
	}
	res := q.tx.SendBatch(ctx, &q.pb)
	for _, p := range q.want {
		tag, err := res.Exec()
		if err != nil {
			res.Close()
			if derr := dataError(err, p.ref); derr != nil {
				return fmt.Errorf("%s %s%s: %w", p.what, p.export, p.at, derr)
			}
			return fmt.Errorf("%s %s%s: %w", p.what, p.export, p.at, err)
		}
		if p.want >= 0 && tag.RowsAffected() != p.want {
			res.Close()
			return fmt.Errorf("%s %s%s: %d rows affected, want %d: the target is not in step with the source (changed by someone else?): %w",
				p.what, p.export, p.at, tag.RowsAffected(), p.want, errPermanent)
		}
		if p.then != nil {
			p.then(tag.RowsAffected())
		}
	}
	q.pb, q.want = pgx.Batch{}, q.want[:0]
	return res.Close()
}

// step queues one record's statements, flushing when the batch is full; loading relaxes the
// checks that a load cannot meet (see loadPart).
func (q *queue) step(ctx context.Context, t *target, s *step, r *record, loading bool) (int, error) {
	if r.env.Op == "t" {
		tr := truncation{s.export, s.lsn, s.sequence}
		if tr == q.lastTruncate {
			return 0, nil
		}
		q.lastTruncate = tr
	}
	n, err := q.a.queue(&q.pb, &q.want, t, s, r, loading)
	if err != nil {
		return 0, fmt.Errorf("%s%s: %w", s.export, s.where(), err)
	}
	q.want[len(q.want)-1].ref = s.ref()
	if loading {
		q.a.loads[s.export].track(s, r, &q.want[len(q.want)-1])
	}
	if q.pb.Len() >= q.a.chunk {
		if err := q.flush(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// resolve returns the export's target table, created from r's schema when missing and asked
// to; nil when it does not exist.
func (a *applier) resolve(ctx context.Context, tx pgx.Tx, e change.ExportID, r *record) (*target, error) {
	if t := a.tables[e]; t != nil {
		return t, nil
	}
	name := a.targetName(e)
	if err := a.refused(e, name); err != nil {
		return nil, err
	}
	t, ok, err := loadTarget(ctx, tx, name)
	if err != nil {
		return nil, err
	}
	if !ok && a.createTables && r != nil && r.schema != nil {
		sql, err := createSQL(name, r.schema.Fields(), keyColumns(r))
		if err != nil {
			return nil, fmt.Errorf("create %s: %v: %w", name.Sanitize(), err, errPermanent)
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("create %s: %w", name.Sanitize(), err)
		}
		a.log.Info("created target table", "table", name.Sanitize(), "export", e.String())
		if t, ok, err = loadTarget(ctx, tx, name); err != nil {
			return nil, err
		}
	}
	if !ok {
		return nil, nil
	}
	if a.tables == nil {
		a.tables = map[change.ExportID]*target{}
	}
	a.tables[e] = t
	return t, nil
}

// queue queues the statements of one record and returns the row changes it counts as. While
// loading, an update or a key change may find no row: the copy's row of that key comes later
// (a chunked copy reads a key after changes to it that committed before its chunk).
func (a *applier) queue(pb *pgx.Batch, want *[]pending, t *target, s *step, r *record, loading bool) (int, error) {
	must := int64(1)
	if loading {
		must = -1
	}
	row := r.env.After
	if r.env.Op == "d" {
		row = r.env.Before
	}
	if err := t.checkRecord(s.export, r); err != nil {
		return 0, err
	}
	conv := func(name string, raw json.RawMessage) (any, error) {
		v, err := t.text(name, raw, r)
		if err != nil || v == nil {
			return nil, err
		}
		return *v, nil
	}
	switch r.env.Op {
	case "t":
		pb.Queue("TRUNCATE " + t.name.Sanitize())
		*want = append(*want, pending{want: -1, export: s.export, what: "truncate", at: s.where()})
		return 1, nil
	case "d":
		if len(s.newKey) > 0 {
			// The first half of a key change: move the row to the new key, so that the
			// create that follows can merge into it (it may leave unchanged TOAST out).
			var newKey map[string]json.RawMessage
			if err := unmarshalKey(s.newKey, &newKey); err != nil {
				return 0, fmt.Errorf("read %s header: %w", "tidemark.new_key", err)
			}
			sql, args, err := a.updateSQL(t, newKey, r.key, conv)
			if err != nil {
				return 0, err
			}
			pb.Queue(sql, args...)
			*want = append(*want, pending{want: must, export: s.export, what: "move row", at: s.where()})
			return 1, nil
		}
		where, args, err := a.keyMatch(t, r.key, conv, 0)
		if err != nil {
			return 0, err
		}
		pb.Queue("DELETE FROM "+t.name.Sanitize()+" WHERE "+where, args...)
		*want = append(*want, pending{want: -1, export: s.export, what: "delete", at: s.where()})
		return 1, nil
	case "r", "c", "u":
		if row == nil {
			return 0, fmt.Errorf("op %s without after", r.env.Op)
		}
		if s.unchanged && loading && a.loads[s.export].old != nil {
			// Into a re-copied table: the columns left out come from its old row.
			sql, args, err := a.loads[s.export].completeSQL(s, row, r, conv)
			if err != nil {
				return 0, err
			}
			pb.Queue(sql, args...)
			*want = append(*want, pending{want: must, export: s.export, what: "update", at: s.where()})
			return 1, nil
		}
		if s.unchanged {
			// Unchanged TOAST columns are left out: set only the columns carried.
			sql, args, err := a.updateSQL(t, row, r.key, conv)
			if err != nil {
				return 0, err
			}
			pb.Queue(sql, args...)
			*want = append(*want, pending{want: must, export: s.export, what: "update", at: s.where()})
			return 1, nil
		}
		names := sortedNames(t, row)
		args := make([]any, len(names))
		for i, n := range names {
			v, err := conv(n, row[n])
			if err != nil {
				return 0, err
			}
			args[i] = v
		}
		pb.Queue(t.upsertSQL(names), args...)
		*want = append(*want, pending{want: -1, export: s.export, what: "upsert", at: s.where()})
		return 1, nil
	}
	return 0, fmt.Errorf("unknown op %q", r.env.Op)
}

// keyColumns are the key columns of a record with a schema, in the table's column order.
func keyColumns(r *record) []string {
	var ordered []string
	for _, f := range r.schema.Fields() {
		if _, ok := r.key[f.Name()]; ok {
			ordered = append(ordered, f.Name())
		}
	}
	return ordered
}

// checkRecord compares the target with a record's columns and key, for every record: a
// column the target lacks, or a key that is not the target's primary key, is an error (a
// truncate carries none, but its target must have a key too).
func (t *target) checkRecord(e change.ExportID, r *record) error {
	row := r.env.After
	if r.env.Op == "d" {
		row = r.env.Before
	}
	fits := len(t.key) > 0 && (r.env.Op == "t" || len(r.key) == len(t.key))
	for c := range row {
		fits = fits && t.cols[c] != nil
	}
	if fits && r.env.Op != "t" {
		for _, k := range t.key {
			if _, ok := r.key[k]; !ok {
				fits = false
			}
		}
	}
	if fits {
		return nil
	}
	var cols, key []string
	for c := range row {
		cols = append(cols, c)
	}
	for k := range r.key {
		key = append(key, k)
	}
	if r.env.Op == "t" {
		key = t.key
	}
	if err := t.check(e, cols, key); err != nil {
		return err
	}
	return fmt.Errorf("target %s does not match the record: %w", t.name.Sanitize(), errPermanent)
}

// text converts one column's JSON value to the text PostgreSQL's input function reads for the
// target column (nil for SQL NULL).
func (t *target) text(name string, raw json.RawMessage, r *record) (*string, error) {
	return t.textField(name, raw, r.schema, r.dec)
}

// textField is text with the record's schema (nil for json) and format's decoder.
func (t *target) textField(name string, raw json.RawMessage, schema format.Schema, dec format.Decoder) (*string, error) {
	col := t.cols[name]
	if col == nil {
		return nil, fmt.Errorf("target %s has no column %s: %w", t.name.Sanitize(), name, errPermanent)
	}
	var f format.Field
	if schema != nil {
		f = schema.Field(name)
	}
	b, ok, err := appendText(nil, raw, col, f, dec)
	if err != nil {
		return nil, fmt.Errorf("column %s: %w", name, err)
	}
	if !ok {
		return nil, nil
	}
	s := string(b)
	return &s, nil
}

// sortedNames lists row's columns in the target's column order.
func sortedNames(t *target, row map[string]json.RawMessage) []string {
	names := make([]string, 0, len(row))
	for _, c := range t.order {
		if _, ok := row[c]; ok {
			names = append(names, c)
		}
	}
	return names
}

// upsertSQL is INSERT ... ON CONFLICT (key) DO UPDATE of the columns named, cached per set.
func (t *target) upsertSQL(names []string) string {
	k := "u\x00" + strings.Join(names, "\x00")
	if s, ok := t.sql[k]; ok {
		return s
	}
	if len(t.sql) >= maxStatements {
		// A table whose records come with ever new column sets (updates that leave
		// different TOAST columns out) must not grow this without bound.
		clear(t.sql)
	}
	var b strings.Builder
	b.WriteString("INSERT INTO " + t.name.Sanitize() + " (")
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{n}.Sanitize())
	}
	b.WriteString(") VALUES (")
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(param(i+1, t.cols[n]))
	}
	b.WriteString(") ON CONFLICT (")
	for i, k := range t.key {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{k}.Sanitize())
	}
	b.WriteString(") DO ")
	var set []string
	for _, n := range names {
		if !slices.Contains(t.key, n) {
			q := pgx.Identifier{n}.Sanitize()
			set = append(set, q+" = EXCLUDED."+q)
		}
	}
	if len(set) == 0 {
		b.WriteString("NOTHING")
	} else {
		b.WriteString("UPDATE SET " + strings.Join(set, ", "))
	}
	t.sql[k] = b.String()
	return t.sql[k]
}

// param is $n of the column's type. The value is a Go string, which pgx sends in text format,
// so PostgreSQL's input function of the type reads it. (A cast from text would not do: text to
// regclass, for one, is a function that refuses the '-' that regclass's output writes.)
func param(n int, c *column) string {
	return "$" + strconv.Itoa(n) + "::" + c.typ
}

// updateSQL is the UPDATE that sets the columns of row on the target row whose key is key, and
// its arguments.
func (a *applier) updateSQL(t *target, row, key map[string]json.RawMessage, conv func(string, json.RawMessage) (any, error)) (string, []any, error) {
	set, args, err := a.assignments(t, row, conv, 0)
	if err != nil {
		return "", nil, err
	}
	where, wargs, err := a.keyMatch(t, key, conv, len(args))
	if err != nil {
		return "", nil, err
	}
	return "UPDATE " + t.name.Sanitize() + " SET " + set + " WHERE " + where, append(args, wargs...), nil
}

// assignments is "c1 = $n::..., c2 = ..." of row's columns, parameters numbered after base.
func (a *applier) assignments(t *target, row map[string]json.RawMessage, conv func(string, json.RawMessage) (any, error), base int) (string, []any, error) {
	var parts []string
	var args []any
	for _, n := range sortedNames(t, row) {
		v, err := conv(n, row[n])
		if err != nil {
			return "", nil, err
		}
		args = append(args, v)
		parts = append(parts, pgx.Identifier{n}.Sanitize()+" = "+param(base+len(args), t.cols[n]))
	}
	if len(parts) == 0 {
		return "", nil, fmt.Errorf("no columns to set")
	}
	return strings.Join(parts, ", "), args, nil
}

// keyMatch is "k1 = $n::... AND ..." of the key's columns, parameters numbered after base.
func (a *applier) keyMatch(t *target, key map[string]json.RawMessage, conv func(string, json.RawMessage) (any, error), base int) (string, []any, error) {
	var parts []string
	var args []any
	for _, k := range t.key {
		raw, ok := key[k]
		if !ok {
			return "", nil, fmt.Errorf("record key without %s", k)
		}
		v, err := conv(k, raw)
		if err != nil {
			return "", nil, err
		}
		args = append(args, v)
		parts = append(parts, pgx.Identifier{k}.Sanitize()+" = "+param(base+len(args), t.cols[k]))
	}
	return strings.Join(parts, " AND "), args, nil
}

// lagOf is the cut's lag: from its latest source commit to now.
func lagOf(b *batch, now time.Time) (time.Duration, bool) {
	if b.commitTime.IsZero() {
		return 0, false
	}
	return now.Sub(b.commitTime), true
}

// maxStatements bounds the statements cached per table (one per set of columns).
const maxStatements = 64

// skipped returns steps without the records APPLY_SKIP_RECORDS lists, saying so for each.
func (a *applier) skipped(steps []step) []step {
	out := steps[:0]
	for i := range steps {
		if s := &steps[i]; s.kind == stepRecord && a.skip[s.ref()] {
			a.log.Warn("record passed over, as APPLY_SKIP_RECORDS asks: its change is not applied", "record", s.ref().String(), "export", s.export.String(), "op", string(s.op))
			continue
		}
		out = append(out, steps[i])
	}
	return out
}

// refused returns an error when e's target is a table the applier never writes: one in a
// system schema, or its own progress table (a watermark record naming one was not written by
// cdc, or the configuration maps a table onto it).
func (a *applier) refused(e change.ExportID, name pgx.Identifier) error {
	switch {
	case consumer.SystemSchema(name[0]):
		return fmt.Errorf("export %s maps to %s, in a system schema: refused: %w", e, name.Sanitize(), errPermanent)
	case name[0] == a.progress[0] && name[1] == a.progress[1]:
		return fmt.Errorf("export %s maps to %s, the applier's progress table: refused: %w", e, name.Sanitize(), errPermanent)
	}
	return nil
}

// dataClass reports whether a SQLSTATE is a data exception (class 22: a value that does not
// fit its column) or an integrity constraint violation (class 23): the record's data, not the
// connection, is at fault, and no retry helps.
func dataClass(code string) bool {
	return strings.HasPrefix(code, "22") || strings.HasPrefix(code, "23")
}

// dataError turns PostgreSQL's refusal of one record's data into a permanent error naming the
// record and what to do; nil when err is not that.
func dataError(err error, ref recordRef) error {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok || !dataClass(pgErr.Code) || ref.topic == "" {
		return nil
	}
	return fmt.Errorf("PostgreSQL refused the data of record %s: %s (SQLSTATE %s); the applier stops here, with nothing of its cut (or load) applied: make the target accept it (a wider column, a constraint), or set APPLY_SKIP_RECORDS=%s to pass over this record (its change will be missing from the target): %w",
		ref, pgErr.Message, pgErr.Code, ref, errPermanent)
}
