package snapshot

import (
	"context"
	"errors"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/pgcat"
)

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
		return s, pgcat.ErrTableNotFound
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
