package snapshot

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// schemaFingerprintSQL identifies what a chunk's records depend on: the published columns (name,
// type, typmod, in order) and the key (replica identity and its index's columns), and from
// PostgreSQL 15 the column lists and row filters of the table's publications (fingerprintSQL).
// A chunk reads it under its own snapshot; when it differs from the one its table was set up
// with, the schema changed since and the table is set up again before the chunk is read.
const schemaFingerprintSQL = fingerprintColumns + fingerprintFrom

const (
	fingerprintColumns = `SELECT c.relreplident::text || ';' ||
	coalesce((SELECT string_agg(a.attnum || ':' || a.attname || ':' || a.atttypid || ':' || a.atttypmod, ',' ORDER BY a.attnum)
		FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''), '') || ';' ||
	coalesce((SELECT string_agg(i.indkey::text || ':' || i.indisprimary || ':' || i.indisreplident, ',' ORDER BY i.indexrelid)
		FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)), '')`
	fingerprintPublications = ` || ';' ||
	coalesce((SELECT string_agg(pr.prpubid || ':' || coalesce(pr.prattrs::text, '*') || ':' || coalesce(pr.prqual::text, ''), ',' ORDER BY pr.prpubid)
		FROM pg_catalog.pg_publication_rel pr WHERE pr.prrelid = c.oid), '')`
	fingerprintFrom = `
	FROM pg_catalog.pg_class c WHERE c.oid = $1`
)

// fingerprintSQL is schemaFingerprintSQL for the server conn is connected to. From PostgreSQL 15
// it covers the column lists and row filters too: one changed during a chunked copy takes effect
// from the next chunk on, as it does in the stream (the publication poll then copies the table
// again).
func fingerprintSQL(conn *pgx.Conn) string {
	if pgcat.ServerMajor(conn.PgConn().ParameterStatus("server_version")) < 15 {
		return schemaFingerprintSQL
	}
	return fingerprintColumns + fingerprintPublications + fingerprintFrom
}

// oid is t's table OID (under planMu: set up before any chunk is read).
func (t *chunkTable) oid() uint32 {
	t.planMu.Lock()
	defer t.planMu.Unlock()
	return t.table.OID
}

// predicate is the WHERE condition of the keys in rg ("" for every key).
func (t *chunkTable) predicate(rg change.KeyRange) string {
	var parts []string
	if rg.From != nil {
		parts = append(parts, t.row()+" > "+t.literal(rg.From))
	}
	if rg.To != nil {
		parts = append(parts, t.row()+" <= "+t.literal(rg.To))
	}
	return strings.Join(parts, " AND ")
}

// row is the key columns as a row constructor.
func (t *chunkTable) row() string { return "(" + strings.Join(t.keyNames, ", ") + ")" }

// literal renders key values as a row of typed literals.
func (t *chunkTable) literal(vals []string) string {
	var b strings.Builder
	b.WriteString("(")
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgcat.Literal(v))
		b.WriteString("::")
		if i < len(t.keyTypes) {
			b.WriteString(t.keyTypes[i])
		} else {
			b.WriteString("text")
		}
	}
	b.WriteString(")")
	return b.String()
}

// readXidSnapshot reads which transactions the snapshot of conn's transaction sees
// (pg_current_snapshot; in a REPEATABLE READ transaction, the transaction's snapshot). Xids are
// cut to the 32 bits pgoutput sends.
func readXidSnapshot(ctx context.Context, conn *pgx.Conn) (*change.XidSnapshot, error) {
	var (
		xmin, xmax int64
		xip        []int64
	)
	err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_snapshot_xmin(s)::text::int8, pg_catalog.pg_snapshot_xmax(s)::text::int8,
		ARRAY(SELECT x::text::int8 FROM pg_catalog.pg_snapshot_xip(s) x)
		FROM pg_catalog.pg_current_snapshot() s`).Scan(&xmin, &xmax, &xip)
	if err != nil {
		return nil, fmt.Errorf("read the chunk's snapshot: %w", err)
	}
	snap := &change.XidSnapshot{Xmin: uint32(xmin), Xmax: uint32(xmax), Xip: make([]uint32, len(xip))}
	for i, x := range xip {
		snap.Xip[i] = uint32(x)
	}
	return snap, nil
}
