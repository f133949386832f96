package pgcat

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
)

// publishedAsSQL reads the column lists and row filters of a publication's tables, as pgoutput
// applies them (PostgreSQL 15): from the publication's own entry for the table, unless the
// publication is FOR ALL TABLES or publishes the table's schema too (then neither applies). A
// partitioned table published under publish_via_partition_root is one entry: the root's list
// and filter cover every partition's rows. Tables without a list or filter are left out.
//
// It reads pg_publication_rel itself rather than pg_publication_tables, whose function reads
// the catalog as of now: under a snapshot's transaction this query sees the definition as of
// the snapshot, which is the one pgoutput applies to the changes that follow it.
const publishedAsSQL = `SELECT n.nspname::text, c.relname::text,
		(SELECT array_agg(k ORDER BY k) FROM unnest(pr.prattrs::int2[]) k),
		(SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
			WHERE a.attrelid = pr.prrelid AND a.attnum = ANY (pr.prattrs::int2[])),
		coalesce(pg_catalog.pg_get_expr(pr.prqual, pr.prrelid), ''), coalesce(pr.prqual::text, '')
	FROM pg_catalog.pg_publication p
	JOIN pg_catalog.pg_publication_rel pr ON pr.prpubid = p.oid
	JOIN pg_catalog.pg_class c ON c.oid = pr.prrelid
	JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE p.pubname = $1 AND NOT p.puballtables AND (pr.prattrs IS NOT NULL OR pr.prqual IS NOT NULL)
		AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_namespace pn
			WHERE pn.pnpubid = p.oid AND pn.pnnspid = c.relnamespace)`

// PublishedAs reads how the publication pub publishes its tables that have a column list or a
// row filter; a table not in the result publishes every column and row. Before PostgreSQL 15,
// which has neither, the result is empty.
func PublishedAs(ctx context.Context, conn Querier, pub string) (map[change.ExportID]change.PublishedAs, error) {
	out := make(map[change.ExportID]change.PublishedAs)
	if serverMajor(conn) < 15 {
		return out, nil
	}
	rows, err := conn.Query(ctx, publishedAsSQL, pub)
	if err != nil {
		return nil, fmt.Errorf("read column lists and row filters of publication %s: %w", pub, err)
	}
	var (
		e change.ExportID
		p change.PublishedAs
	)
	_, err = pgx.ForEachRow(rows, []any{&e.Schema, &e.Table, &p.Columns, &p.Names, &p.RowFilter, &p.FilterTree}, func() error {
		out[e] = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read column lists and row filters of publication %s: %w", pub, err)
	}
	return out, nil
}

// publishedAs reads how pub publishes the table with OID oid, under conn's snapshot.
func publishedAs(ctx context.Context, conn Querier, pub string, oid uint32) (change.PublishedAs, error) {
	var p change.PublishedAs
	if pub == "" || serverMajor(conn) < 15 {
		return p, nil
	}
	rows, err := conn.Query(ctx, publishedAsSQL+` AND pr.prrelid = $2`, pub, oid)
	if err != nil {
		return p, err
	}
	var schema, table string
	_, err = pgx.ForEachRow(rows, []any{&schema, &table, &p.Columns, &p.Names, &p.RowFilter, &p.FilterTree}, func() error { return nil })
	return p, err
}
