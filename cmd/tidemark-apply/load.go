package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
)

// A table that joins (its first copy, or a new one after a re-copy) is built beside the live
// table, in a shadow table of the same name in a schema of the applier's own
// (tidemark_load_<hash of APPLY_NAME and the target schema>), from the load parts the reader
// delivers before the joining cut: each part in a transaction of its own, the copy's rows with
// COPY. The joining cut makes the shadow the table, in the cut's transaction: it drops the
// live table and moves the shadow into its place (or, when other objects depend on the live
// table, replaces its rows with the shadow's). A reader of the target sees the old table, or
// none, until that cut commits; never an empty or half-copied one. A load interrupted by a
// restart starts again from its first part, which recreates the shadow.

// shadowName is the shadow table of e's target.
func (a *applier) shadowName(e change.ExportID) pgx.Identifier {
	t := a.targetName(e)
	h := fnv.New32a()
	h.Write([]byte(a.name + "\x00" + t[0]))
	return pgx.Identifier{fmt.Sprintf("tidemark_load_%08x", h.Sum32()), t[1]}
}

// loadPart applies one part of e's load to its shadow, in a transaction of its own; part 0
// first recreates the shadow. Runs of copied rows go in with COPY; a run that meets a row
// already there (a change of its key that committed before the key's chunk was read) is
// applied row by row instead.
func (a *applier) loadPart(ctx context.Context, b *batch) (rows int, err error) {
	e := b.load.Export
	tx, err := a.conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			delete(a.shadows, e)
		}
	}()
	if b.part == 0 || a.shadows[e] == nil {
		if err := a.createShadow(ctx, tx, e, b); err != nil {
			return 0, err
		}
	}
	t := a.shadows[e]
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
			copied, err := a.copyRows(ctx, tx, t, b.steps[i:j])
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
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit load of %s: %w", e, err)
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

// createShadow (re)creates e's shadow: like the target when it exists, else from the records'
// schema when tables may be created.
func (a *applier) createShadow(ctx context.Context, tx pgx.Tx, e change.ExportID, b *batch) error {
	name := a.shadowName(e)
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name[0]}.Sanitize()); err != nil {
		return fmt.Errorf("create the schema of %s's shadow: %w", e, err)
	}
	if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+name.Sanitize()); err != nil {
		return fmt.Errorf("drop %s's old shadow: %w", e, err)
	}
	live, ok, err := loadTarget(ctx, tx, a.targetName(e))
	if err != nil {
		return err
	}
	switch {
	case ok:
		if _, err := tx.Exec(ctx, "CREATE TABLE "+name.Sanitize()+" (LIKE "+live.name.Sanitize()+" INCLUDING ALL)"); err != nil {
			return fmt.Errorf("create %s's shadow: %w", e, err)
		}
	case a.createTables:
		var r *record
		for i := range b.steps {
			if b.steps[i].op != 't' && len(b.steps[i].schema) > 0 {
				if r, err = decodeRecord(&b.steps[i]); err != nil {
					return fmt.Errorf("record of %s: %w", e, err)
				}
				break
			}
		}
		if r == nil || r.schema == nil {
			return fmt.Errorf("target table %s does not exist, and the first records of its copy carry no schema to create it from (cdc's CDC_VALUE_FORMAT must be json-with-schema): %w",
				a.targetName(e).Sanitize(), errPermanent)
		}
		sql, err := createSQL(name, r.schema, keyColumns(r))
		if err != nil {
			return fmt.Errorf("create %s: %v: %w", a.targetName(e).Sanitize(), err, errPermanent)
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("create %s's shadow: %w", e, err)
		}
	default:
		return fmt.Errorf("target table %s does not exist: create it, or set APPLY_CREATE_TABLES=true with json-with-schema: %w",
			a.targetName(e).Sanitize(), errPermanent)
	}
	t, ok, err := loadTarget(ctx, tx, name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s's shadow %s is missing after its creation", e, name.Sanitize())
	}
	if a.shadows == nil {
		a.shadows = map[change.ExportID]*target{}
	}
	a.shadows[e] = t
	a.log.Info("loading a table beside the live one", "export", e.String(), "shadow", name.Sanitize(), "attempt", b.load.Attempt)
	return nil
}

// copyRows writes copied rows (op r, every column) with one COPY, in a savepoint. ok is false,
// with nothing written, when a row's key is already there (a change that committed before the
// row's chunk was read); the caller applies them one by one then.
func (a *applier) copyRows(ctx context.Context, tx pgx.Tx, t *target, steps []step) (ok bool, err error) {
	var names []string
	var buf []byte
	for i := range steps {
		r, err := decodeRecord(&steps[i])
		if err != nil {
			return false, fmt.Errorf("record: %w", err)
		}
		if !t.checked {
			if err := t.checkRecord(steps[i].export, r); err != nil {
				return false, err
			}
		}
		row := r.env.After
		if row == nil {
			return false, fmt.Errorf("op r without after")
		}
		if names == nil {
			names = sortedNames(t, row)
		} else if len(sortedNames(t, row)) != len(names) {
			return false, nil // columns changed within the run: row by row
		}
		for j, n := range names {
			if j > 0 {
				buf = append(buf, '\t')
			}
			raw, present := row[n]
			if !present {
				return false, nil
			}
			v, err := t.text(n, raw, r)
			if err != nil {
				return false, err
			}
			if v == nil {
				buf = append(buf, `\N`...)
				continue
			}
			buf = appendCopyText(buf, *v)
		}
		buf = append(buf, '\n')
	}
	if len(names) == 0 {
		return false, nil
	}
	cols := make([]string, len(names))
	for i, n := range names {
		cols[i] = pgx.Identifier{n}.Sanitize()
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT tidemark_copy"); err != nil {
		return false, err
	}
	_, err = tx.Conn().PgConn().CopyFrom(ctx, strings.NewReader(string(buf)),
		"COPY "+t.name.Sanitize()+" ("+strings.Join(cols, ", ")+") FROM STDIN")
	if pgErr, isPg := errors.AsType[*pgconn.PgError](err); isPg && pgErr.Code == "23505" {
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT tidemark_copy"); err != nil {
			return false, err
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("copy: %w", err)
	}
	_, err = tx.Exec(ctx, "RELEASE SAVEPOINT tidemark_copy")
	return err == nil, err
}

// appendCopyText appends s escaped for COPY's text format.
func appendCopyText(dst []byte, s string) []byte {
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

// join makes e's loaded shadow the target table, in the joining cut's transaction: the live
// table is dropped and the shadow moved into its place; when other objects depend on the live
// table (a view), its rows are replaced by the shadow's instead.
func (a *applier) join(ctx context.Context, tx pgx.Tx, e change.ExportID) error {
	shadow, live := a.shadowName(e), a.targetName(e)
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", shadow.Sanitize()).Scan(&exists); err != nil {
		return fmt.Errorf("join %s: %w", e, err)
	}
	if !exists {
		return fmt.Errorf("join %s: its shadow %s is missing (its load was not applied)", e, shadow.Sanitize())
	}
	delete(a.tables, e)
	delete(a.shadows, e)
	if _, err := tx.Exec(ctx, "SAVEPOINT tidemark_swap"); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+live.Sanitize())
	if err == nil {
		_, err = tx.Exec(ctx, "ALTER TABLE "+shadow.Sanitize()+" SET SCHEMA "+pgx.Identifier{live[0]}.Sanitize())
		if err != nil {
			return fmt.Errorf("join %s: move the shadow in: %w", e, err)
		}
		a.log.Info("table joined: its copy replaced the table", "export", e.String(), "table", live.Sanitize())
		return nil
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "2BP01" {
		return fmt.Errorf("join %s: drop the old table: %w", e, err)
	}
	// Other objects depend on the live table: keep it, replace its rows.
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT tidemark_swap"); err != nil {
		return err
	}
	t, ok, err := loadTarget(ctx, tx, live)
	if err != nil || !ok {
		return fmt.Errorf("join %s: read %s: %v", e, live.Sanitize(), err)
	}
	cols := make([]string, len(t.order))
	for i, n := range t.order {
		cols[i] = pgx.Identifier{n}.Sanitize()
	}
	list := strings.Join(cols, ", ")
	for _, sql := range []string{
		"DELETE FROM " + live.Sanitize(),
		"INSERT INTO " + live.Sanitize() + " (" + list + ") SELECT " + list + " FROM " + shadow.Sanitize(),
		"DROP TABLE " + shadow.Sanitize(),
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("join %s: replace the rows of %s: %w", e, live.Sanitize(), err)
		}
	}
	a.log.Info("table joined: its copy replaced the table's rows (other objects depend on the table)", "export", e.String(), "table", live.Sanitize())
	return nil
}
