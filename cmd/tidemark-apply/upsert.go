package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A cut's changes are mostly full rows (inserts, and updates that carry every column) of
// distinct keys. Statement by statement, PostgreSQL pays a plan and an executor start for
// each; a run of at least upsertRunMin of them, of one table, with distinct keys and the same
// columns, goes instead as one COPY into a temporary table of the session and one INSERT ...
// SELECT ... ON CONFLICT DO UPDATE, which writes the rows in the same order. (Keys must be
// distinct: one statement cannot update a row twice.)
const upsertRunMin = 32

// upsertRun returns the end of the run of full-row upserts that starts at steps[i] (i when
// there is none long enough).
func upsertRun(steps []step, i int) int {
	full := func(s *step) bool {
		return s.kind == stepRecord && (s.op == 'c' || s.op == 'r' || s.op == 'u') && !s.unchanged && len(s.after) > 0
	}
	if !full(&steps[i]) {
		return i
	}
	seen := map[string]bool{}
	j := i
	for j < len(steps) && full(&steps[j]) && steps[j].export == steps[i].export && !seen[string(steps[j].key)] {
		seen[string(steps[j].key)] = true
		j++
	}
	if j-i < upsertRunMin {
		return i
	}
	return j
}

// upsertRows writes a run of full rows with COPY and one INSERT ... ON CONFLICT. ok is false,
// with nothing written, when the rows do not all carry the same columns; the caller applies
// them one by one then.
func (a *applier) upsertRows(ctx context.Context, tx pgx.Tx, t *target, steps []step) (ok bool, err error) {
	names, buf, ok, err := a.copyText(t, steps)
	if err != nil || !ok {
		return false, err
	}
	stage, err := a.stage(ctx, tx, t)
	if err != nil {
		return false, err
	}
	cols := make([]string, len(names))
	var set []string
	for i, n := range names {
		cols[i] = pgx.Identifier{n}.Sanitize()
		if !slices.Contains(t.key, n) {
			set = append(set, cols[i]+" = EXCLUDED."+cols[i])
		}
	}
	keys := make([]string, len(t.key))
	for i, k := range t.key {
		keys[i] = pgx.Identifier{k}.Sanitize()
	}
	action := "NOTHING"
	if len(set) > 0 {
		action = "UPDATE SET " + strings.Join(set, ", ")
	}
	list := strings.Join(cols, ", ")
	if tx != a.stageTx {
		a.stageTx, a.staged = tx, map[string]bool{}
	}
	if a.staged[stage[1]] {
		// Used before in this transaction (ON COMMIT DELETE ROWS empties it at the end).
		if _, err := tx.Exec(ctx, "DELETE FROM "+stage.Sanitize()); err != nil {
			return false, fmt.Errorf("upsert %s: empty the staging table: %w", t.name.Sanitize(), err)
		}
	}
	a.staged[stage[1]] = true
	// In a savepoint: a value the target refuses (too long, out of range, a constraint) is
	// rolled back and the rows go one by one, which names the record.
	if _, err := tx.Exec(ctx, "SAVEPOINT tidemark_upsert"); err != nil {
		return false, err
	}
	refused := func(err error) (bool, error) {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && dataClass(pgErr.Code) {
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT tidemark_upsert"); err != nil {
				return false, err
			}
			return true, nil
		}
		return false, nil
	}
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(buf), "COPY "+stage.Sanitize()+" ("+list+") FROM STDIN"); err != nil {
		if back, rerr := refused(err); back || rerr != nil {
			return false, rerr
		}
		return false, fmt.Errorf("upsert %s: copy: %w", t.name.Sanitize(), err)
	}
	sql := "INSERT INTO " + t.name.Sanitize() + " (" + list + ") SELECT " + list + " FROM " + stage.Sanitize() + " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO " + action
	if _, err := tx.Exec(ctx, sql); err != nil {
		if back, rerr := refused(err); back || rerr != nil {
			return false, rerr
		}
		return false, fmt.Errorf("upsert %s (records%s ..%s): %w", t.name.Sanitize(), steps[0].where(), steps[len(steps)-1].where(), err)
	}
	if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT tidemark_upsert"); err != nil {
		return false, err
	}
	return true, nil
}

// stage returns t's temporary table on tx's connection, made when first needed (LIKE t, so
// made again when t was read again, after a schema change).
func (a *applier) stage(ctx context.Context, tx pgx.Tx, t *target) (pgx.Identifier, error) {
	conn := tx.Conn()
	if name, ok := a.stages[conn][t]; ok {
		return name, nil
	}
	if a.stages == nil {
		a.stages = map[*pgx.Conn]map[*target]pgx.Identifier{}
	}
	if a.stages[conn] == nil {
		a.stages[conn] = map[*target]pgx.Identifier{}
	}
	a.stageSeq++
	name := pgx.Identifier{"pg_temp", fmt.Sprintf("tidemark_stage_%d", a.stageSeq)}
	// A temporary table made in a transaction that rolls back is gone: forget them all then.
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE "+pgx.Identifier{name[1]}.Sanitize()+" (LIKE "+t.name.Sanitize()+") ON COMMIT DELETE ROWS"); err != nil {
		return nil, fmt.Errorf("make a staging table for %s: %w", t.name.Sanitize(), err)
	}
	a.stages[conn][t] = name
	return name, nil
}
