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
	tables, errs, err := LoadTables(ctx, conn, pub, []change.ExportID{e})
	if err != nil {
		return nil, err
	}
	if err := errs[e]; err != nil {
		return nil, err
	}
	return tables[e], nil
}

// LoadTables is LoadTable for many tables in two queries, whatever their number: the tables'
// catalog entries, and the publication's column lists and row filters. A table that cannot be
// loaded (ErrTableNotFound, ErrUnsupportedTable) has its error in the second result; the error
// is for the query alone.
func LoadTables(ctx context.Context, conn Querier, pub string, exports []change.ExportID) (map[change.ExportID]*change.Table, map[change.ExportID]error, error) {
	entries, err := tableEntries(ctx, conn, exports)
	if err != nil {
		return nil, nil, err
	}
	defs := map[change.ExportID]change.PublishedAs{}
	if pub != "" && len(entries) > 0 {
		if defs, err = PublishedAs(ctx, conn, pub); err != nil {
			return nil, nil, fmt.Errorf("load tables: %w", err)
		}
	}
	tables := make(map[change.ExportID]*change.Table, len(entries))
	errs := make(map[change.ExportID]error)
	for _, e := range exports {
		en, ok := entries[e]
		if !ok {
			errs[e] = fmt.Errorf("load table %s: %w", e, ErrTableNotFound)
			continue
		}
		if t, err := en.table(e, pub, defs[e]); err != nil {
			errs[e] = err
		} else {
			tables[e] = t
		}
	}
	return tables, errs, nil
}

// tableEntry is one table's catalog entry as tableEntries reads it: its kind, replica identity,
// key columns (by the replica identity) and columns (not dropped, not generated) in attnum order.
type tableEntry struct {
	oid                uint32
	relkind, replident string
	keys               []int16
	nums               []int16
	names              []string
	types              []uint32
	mods               []int32
}

// tableEntriesSQL reads the entries of the tables named by $1 (schemas) and $2 (names): the key
// is the primary key for replica identity default or full, the replica identity index for
// index, none for nothing.
const tableEntriesSQL = `SELECT w.nspname, w.relname, c.oid, c.relkind::text, c.relreplident::text,
		coalesce((SELECT array_agg(k::int2) FROM pg_catalog.pg_index i, unnest(i.indkey) AS k
			WHERE i.indrelid = c.oid AND CASE c.relreplident WHEN 'i' THEN i.indisreplident
				WHEN 'n' THEN false ELSE i.indisprimary END), '{}'),
		coalesce(a.nums, '{}'), coalesce(a.names, '{}'), coalesce(a.types, '{}'), coalesce(a.mods, '{}')
	FROM unnest($1::text[], $2::text[]) AS w(nspname, relname)
	JOIN pg_catalog.pg_namespace n ON n.nspname = w.nspname
	JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = w.relname
	LEFT JOIN LATERAL (SELECT array_agg(a.attnum ORDER BY a.attnum) AS nums,
			array_agg(a.attname::text ORDER BY a.attnum) AS names,
			array_agg(a.atttypid ORDER BY a.attnum) AS types,
			array_agg(a.atttypmod ORDER BY a.attnum) AS mods
		FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '') a ON true`

// tableEntries reads the catalog entries of exports in one query; a table that does not exist
// is absent.
func tableEntries(ctx context.Context, conn Querier, exports []change.ExportID) (map[change.ExportID]tableEntry, error) {
	schemas, names := make([]string, len(exports)), make([]string, len(exports))
	for i, e := range exports {
		schemas[i], names[i] = e.Schema, e.Table
	}
	rows, err := conn.Query(ctx, tableEntriesSQL, schemas, names)
	if err != nil {
		return nil, fmt.Errorf("load %d table(s): %w", len(exports), err)
	}
	out := make(map[change.ExportID]tableEntry, len(exports))
	var (
		e  change.ExportID
		en tableEntry
	)
	_, err = pgx.ForEachRow(rows, []any{&e.Schema, &e.Table, &en.oid, &en.relkind, &en.replident, &en.keys,
		&en.nums, &en.names, &en.types, &en.mods}, func() error {
		out[e] = en
		en = tableEntry{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load %d table(s): %w", len(exports), err)
	}
	return out, nil
}

// table checks en and makes e's schema of it, as publication pub publishes it (published).
func (en tableEntry) table(e change.ExportID, pub string, published change.PublishedAs) (*change.Table, error) {
	if en.relkind != "r" && en.relkind != "p" {
		return nil, fmt.Errorf("load table %s: %w: relation kind %q is not a table", e, ErrUnsupportedTable, en.relkind)
	}
	if en.replident == "i" && len(en.keys) == 0 {
		return nil, fmt.Errorf("load key of %s: %w: replica identity index is missing", e, ErrUnsupportedTable)
	}
	listed := func(num int16) bool { return published.Columns == nil || slices.Contains(published.Columns, num) }
	t := &change.Table{Export: e, OID: en.oid, Published: published}
	var (
		keySeen  int
		unlisted []string // key columns the column list leaves out
	)
	for i, num := range en.nums {
		col := change.Column{Name: en.names[i], TypeOID: en.types[i], TypeMod: en.mods[i], Key: slices.Contains(en.keys, num)}
		if !listed(num) {
			if col.Key {
				unlisted = append(unlisted, col.Name)
			}
			continue
		}
		if col.Key {
			keySeen++
		}
		t.Columns = append(t.Columns, col)
	}
	if len(unlisted) > 0 {
		return nil, fmt.Errorf("load key of %s: %w: the column list of publication %s leaves out the key column(s) %s, so its records' key would be incomplete; add them to the list (ALTER PUBLICATION %s SET TABLE %s (...))",
			e, ErrUnsupportedTable, change.QuoteIdent(pub), strings.Join(unlisted, ", "), change.QuoteIdent(pub), e)
	}
	if keySeen != countDistinct(en.keys) {
		// An index on an expression has attnum 0 in indkey; it cannot be a key here anyway.
		return nil, fmt.Errorf("load key of %s: %w: key refers to columns that are not published", e, ErrUnsupportedTable)
	}
	return t, nil
}

// countDistinct counts the distinct values of nums.
func countDistinct(nums []int16) int {
	seen := make(map[int16]bool, len(nums))
	for _, n := range nums {
		seen[n] = true
	}
	return len(seen)
}
