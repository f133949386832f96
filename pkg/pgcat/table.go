package pgcat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
)

// ErrTableNotFound is returned (wrapped) by LoadTable when the table does not exist, or no longer
// exists under its name.
var ErrTableNotFound = errors.New("table does not exist")

// ErrUnsupportedTable is returned (wrapped) by LoadTable for a relation that cannot be exported:
// not a table, or a replica identity that is broken.
var ErrUnsupportedTable = errors.New("table cannot be exported")

// LoadTable reads e's schema as the publication pub publishes it: its columns in attnum order
// (not dropped, not generated, since pgoutput does not send generated columns; only those of
// the publication's column list when it has one), their type OIDs and typmods, its key columns,
// chosen by the replica identity: default -> primary key, index -> the replica identity index,
// full -> primary key if any, nothing -> no key, and the publication's row filter
// (Table.Published). A column list that leaves out a key column is refused
// (ErrUnsupportedTable): the records' key would be incomplete. pub "" reads every column and no
// filter. It runs under whatever snapshot conn's current transaction has, so the snapshot stage
// reads the schema and the publication's definition as of its consistent point; the other
// stages may call it on any ordinary connection.
func LoadTable(ctx context.Context, conn Querier, pub string, e change.ExportID) (*change.Table, error) {
	var (
		oid       uint32
		relkind   string
		replident string
	)
	err := conn.QueryRow(ctx, `SELECT c.oid, c.relkind::text, c.relreplident::text
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, e.Schema, e.Table).Scan(&oid, &relkind, &replident)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("load table %s: %w", e, ErrTableNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load table %s: %w", e, err)
	}
	if relkind != "r" && relkind != "p" {
		return nil, fmt.Errorf("load table %s: %w: relation kind %q is not a table", e, ErrUnsupportedTable, relkind)
	}

	keys := map[int16]bool{}
	var keyCond string
	switch replident {
	case "d", "f":
		keyCond = "i.indisprimary"
	case "i":
		keyCond = "i.indisreplident"
	}
	if keyCond != "" {
		rows, err := conn.Query(ctx, `SELECT k::int2 FROM pg_catalog.pg_index i, unnest(i.indkey) AS k
			WHERE i.indrelid = $1 AND `+keyCond, oid)
		if err != nil {
			return nil, fmt.Errorf("load key of %s: %w", e, err)
		}
		nums, err := pgx.CollectRows(rows, pgx.RowTo[int16])
		if err != nil {
			return nil, fmt.Errorf("load key of %s: %w", e, err)
		}
		for _, n := range nums {
			keys[n] = true
		}
		if replident == "i" && len(keys) == 0 {
			return nil, fmt.Errorf("load key of %s: %w: replica identity index is missing", e, ErrUnsupportedTable)
		}
	}

	published, err := publishedAs(ctx, conn, pub, oid)
	if err != nil {
		return nil, fmt.Errorf("load publication %s of %s: %w", pub, e, err)
	}
	listed := func(num int16) bool { return published.Columns == nil || slices.Contains(published.Columns, num) }

	rows, err := conn.Query(ctx, `SELECT a.attnum, a.attname::text, a.atttypid, a.atttypmod
		FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, fmt.Errorf("load columns of %s: %w", e, err)
	}
	t := &change.Table{Export: e, OID: oid, Published: published}
	var (
		num      int16
		col      change.Column
		keySeen  int
		unlisted []string // key columns the column list leaves out
	)
	_, err = pgx.ForEachRow(rows, []any{&num, &col.Name, &col.TypeOID, &col.TypeMod}, func() error {
		col.Key = keys[num]
		if !listed(num) {
			if col.Key {
				unlisted = append(unlisted, col.Name)
			}
			return nil
		}
		if col.Key {
			keySeen++
		}
		t.Columns = append(t.Columns, col)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load columns of %s: %w", e, err)
	}
	if len(unlisted) > 0 {
		return nil, fmt.Errorf("load key of %s: %w: the column list of publication %s leaves out the key column(s) %s, so its records' key would be incomplete; add them to the list (ALTER PUBLICATION %s SET TABLE %s (...))",
			e, ErrUnsupportedTable, change.QuoteIdent(pub), strings.Join(unlisted, ", "), change.QuoteIdent(pub), e)
	}
	if keySeen != len(keys) {
		// An index on an expression has attnum 0 in indkey; it cannot be a key here anyway.
		return nil, fmt.Errorf("load key of %s: %w: key refers to columns that are not published", e, ErrUnsupportedTable)
	}
	return t, nil
}
