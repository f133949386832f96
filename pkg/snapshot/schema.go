package snapshot

import (
	"context"
	"errors"
	"fmt"
	"math"
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
func LoadTable(ctx context.Context, conn *pgx.Conn, pub string, e change.ExportID) (*change.Table, error) {
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

// tableStats is what the snapshot reads about a table besides its schema.
type tableStats struct {
	relkind    string
	filenode   uint32 // relfilenode under the snapshot; 0 for tables without storage
	blocks     int64
	estimated  int64
	canSelect  bool
	tupleWidth int64
	blockSize  int64
}

// loadStats reads size, row estimate and privilege of the table with OID oid, under conn's
// snapshot.
func loadStats(ctx context.Context, conn *pgx.Conn, oid uint32) (tableStats, error) {
	var (
		s         tableStats
		reltuples float64
		relpages  int64
	)
	err := conn.QueryRow(ctx, `SELECT c.relkind::text, c.relfilenode, c.reltuples::float8, c.relpages::int8,
			coalesce(pg_catalog.pg_relation_size(c.oid), 0) / current_setting('block_size')::int8,
			current_setting('block_size')::int8,
			pg_catalog.has_table_privilege(c.oid, 'SELECT'),
			(SELECT coalesce(sum(CASE WHEN t.typlen > 0 THEN t.typlen ELSE 32 END), 0)::int8
				FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
				WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
		FROM pg_catalog.pg_class c WHERE c.oid = $1`, oid).
		Scan(&s.relkind, &s.filenode, &reltuples, &relpages, &s.blocks, &s.blockSize, &s.canSelect, &s.tupleWidth)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, ErrTableNotFound
	}
	if err != nil {
		return s, err
	}
	s.estimated = estimateRows(reltuples, relpages, s.blocks, s.tupleWidth, s.blockSize)
	return s, nil
}

// estimateRows estimates a table's rows the way the planner does: the density reltuples/relpages
// from the last VACUUM or ANALYZE applied to the current size in blocks; without statistics
// (reltuples = -1, or none gathered since the table grew from empty) from the tuple width.
func estimateRows(reltuples float64, relpages, blocks, tupleWidth, blockSize int64) int64 {
	if blocks <= 0 {
		return 0
	}
	if reltuples >= 0 && relpages > 0 {
		return int64(math.Round(reltuples / float64(relpages) * float64(blocks)))
	}
	if blockSize <= 0 {
		blockSize = 8192
	}
	// 24-byte page header; per tuple a 23-byte header rounded to 24 and a 4-byte line pointer.
	perPage := (blockSize - 24) / (max(tupleWidth, 1) + 28)
	return blocks * max(perPage, 1)
}
