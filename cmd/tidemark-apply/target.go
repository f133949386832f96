package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
)

// errPermanent marks an error that a retry cannot fix (a target table that does not match);
// the applier stops with it instead of retrying.
var errPermanent = errors.New("permanent")

// column is one column of a target table.
type column struct {
	name string
	// typ is the column's type without its modifier (format_type with typemod -1: numeric,
	// character varying, "bit"): the cast of its values. The modifier is left to the
	// assignment to the column, which refuses what does not fit (a string too long for
	// varchar(3), a bit string of another length), where an explicit cast to varchar(3) would
	// cut 'Ada Lovelace' to 'Ada' in silence.
	typ string
	// Column is what the record's format needs to read a value without a schema into it:
	// bytea, json or jsonb, an array's element type.
	format.Column
}

// target is a target table as the applier writes it.
type target struct {
	name  pgx.Identifier
	cols  map[string]*column
	order []string // column names in table order
	key   []string // primary key columns, in index order
	sql   map[string]string
	pos   map[string]int // column name -> index in order (copyText)
}

// loadTarget reads table's columns and primary key; ok is false when the table does not exist.
func loadTarget(ctx context.Context, q querier, name pgx.Identifier) (*target, bool, error) {
	rows, err := q.Query(ctx, `
SELECT a.attname, format_type(a.atttypid, -1),
       coalesce(bt.typname, t.typname) IN ('bytea'), coalesce(bt.typname, t.typname) IN ('json', 'jsonb'),
       et.oid IS NOT NULL, coalesce(et.typname, '') = 'bytea', coalesce(et.typname, '') IN ('json', 'jsonb'),
       format_type(et.oid, NULL),
       -- int2vector subscripts start at 0
       coalesce(array_position(i.indkey::int2[], a.attnum) - array_lower(i.indkey::int2[], 1) + 1, 0)
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
LEFT JOIN pg_type et ON t.typcategory = 'A' AND et.oid = t.typelem
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, name.Sanitize())
	if err != nil {
		return nil, false, fmt.Errorf("read columns of %s: %w", name.Sanitize(), err)
	}
	t := &target{name: name, cols: make(map[string]*column), sql: make(map[string]string)}
	keyPos := map[string]int{}
	for rows.Next() {
		var c column
		var isArray, elemBytea, elemJSON bool
		var elemType *string
		var pos int
		if err := rows.Scan(&c.name, &c.typ, &c.IsBytea, &c.IsJSON, &isArray, &elemBytea, &elemJSON, &elemType, &pos); err != nil {
			rows.Close()
			return nil, false, fmt.Errorf("read columns of %s: %w", name.Sanitize(), err)
		}
		if isArray && elemType != nil {
			c.Elem = &format.Column{IsBytea: elemBytea, IsJSON: elemJSON}
		}
		t.cols[c.name] = &c
		t.order = append(t.order, c.name)
		if pos > 0 {
			keyPos[c.name] = pos
			t.key = append(t.key, c.name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("read columns of %s: %w", name.Sanitize(), err)
	}
	slices.SortFunc(t.key, func(a, b string) int { return keyPos[a] - keyPos[b] })
	return t, len(t.order) > 0, nil
}

// querier is what loadTarget and createTarget need of a connection or transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// check compares the target with a record's columns and key: every column the source sends
// must exist in the target, and the target's primary key must be the source's key.
func (t *target) check(export change.ExportID, cols, key []string) error {
	var missing []string
	for _, c := range cols {
		if t.cols[c] == nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("target %s has no column %s of %s: add it, or drop and let APPLY_CREATE_TABLES create the table: %w",
			t.name.Sanitize(), strings.Join(missing, ", "), export, errPermanent)
	}
	if len(t.key) == 0 {
		return fmt.Errorf("target %s has no primary key: give it the key of %s (%s): %w",
			t.name.Sanitize(), export, strings.Join(key, ", "), errPermanent)
	}
	a, b := slices.Clone(t.key), slices.Clone(key)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		return fmt.Errorf("target %s's primary key (%s) is not %s's key (%s): %w",
			t.name.Sanitize(), strings.Join(t.key, ", "), export, strings.Join(key, ", "), errPermanent)
	}
	return nil
}

// createSQL is the CREATE TABLE of a target from a json-with-schema record's value fields and
// key column names.
func createSQL(name pgx.Identifier, fields []format.Field, key []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (", name.Sanitize())
	for i, f := range fields {
		typ, err := f.PGType()
		if err != nil {
			return "", fmt.Errorf("column %s: %w", f.Name(), err)
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", pgx.Identifier{f.Name()}.Sanitize(), typ)
	}
	if len(key) == 0 {
		return "", fmt.Errorf("no key: tidemark-apply needs tables with a key")
	}
	b.WriteString(", PRIMARY KEY (")
	for i, k := range key {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{k}.Sanitize())
	}
	b.WriteString("))")
	return b.String(), nil
}
