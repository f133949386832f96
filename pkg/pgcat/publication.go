package pgcat

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
)

// ErrSetup marks an error that a retry cannot fix: the server, the role, the publication or
// the slot needs a person (the message says what to do). Check with errors.Is.
var ErrSetup = errors.New("setup needs a fix")

type setupErr struct{ err error }

func (e *setupErr) Error() string   { return e.err.Error() }
func (e *setupErr) Unwrap() []error { return []error{ErrSetup, e.err} }

// SetupError wraps err (nil stays nil) as an ErrSetup.
func SetupError(err error) error {
	if err == nil {
		return nil
	}
	return &setupErr{err}
}

// RefusedSetup marks err as an ErrSetup when PostgreSQL answered it with a refusal (a
// permission, an object in the way): a person must act. A lost connection, or a code
// TransientSQLState accepts, is left as it is: a retry fixes it.
func RefusedSetup(err error) error {
	if code, ok := SQLState(err); ok && !TransientSQLState(code) {
		return SetupError(err)
	}
	return err
}

// EnsurePublication creates the publication or adds missing tables when tables are
// configured; otherwise it checks that the publication exists.
func EnsurePublication(ctx context.Context, conn Querier, pub string, tables []change.ExportID) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, pub).Scan(&exists); err != nil {
		return fmt.Errorf("read publication %s: %w", pub, err)
	}
	if len(tables) == 0 {
		if !exists {
			return SetupError(fmt.Errorf("publication %q does not exist; create it (CREATE PUBLICATION %s FOR TABLE ...) or set CDC_TABLES so Tidemark creates it",
				pub, Ident(pub)))
		}
		return nil
	}
	var problems []error
	for _, t := range tables {
		problem, err := checkIdentity(ctx, conn, t)
		if err != nil {
			return err
		}
		if problem != nil {
			problems = append(problems, problem)
		}
	}
	if err := errors.Join(problems...); err != nil {
		return SetupError(err)
	}
	if !exists {
		names := make([]string, len(tables))
		for i, t := range tables {
			names[i] = Table(t)
		}
		_, err := conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", Ident(pub), strings.Join(names, ", ")))
		if err != nil {
			return RefusedSetup(fmt.Errorf("create publication %s: %w", pub, err))
		}
		return nil
	}
	current, err := PublishedTables(ctx, conn, pub)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, ok := current[t]; ok {
			continue
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", Ident(pub), Table(t))); err != nil {
			// A partitioned table published without publish_via_partition_root is listed by
			// its partitions, not by its own name: it is a member already.
			if code, _ := SQLState(err); code == "42710" {
				continue
			}
			return RefusedSetup(fmt.Errorf("add %s to publication %s: %w", t, pub, err))
		}
	}
	return nil
}

// checkIdentity returns a problem for a table PostgreSQL would stop accepting UPDATE and
// DELETE on once it is published (one with neither a primary key nor a replica identity) or
// that does not exist; err is a failed query.
func checkIdentity(ctx context.Context, conn Querier, t change.ExportID) (problem, err error) {
	var ident string
	var hasPK bool
	err = conn.QueryRow(ctx, `SELECT c.relreplident::text, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r','p')`,
		t.Schema, t.Table).Scan(&ident, &hasPK)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("CDC_TABLES names %s, which does not exist", t), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read replica identity of %s: %w", t, err)
	}
	if ident == "n" || (ident == "d" && !hasPK) {
		return fmt.Errorf("table %s has no primary key or replica identity, so PostgreSQL would reject UPDATE and DELETE on it once published; add a primary key, or run ALTER TABLE %s REPLICA IDENTITY FULL", t, Table(t)), nil
	}
	return nil, nil
}

// PublishedTables lists the tables of the publication.
func PublishedTables(ctx context.Context, conn Querier, pub string) (map[change.ExportID]struct{}, error) {
	rows, err := conn.Query(ctx, `SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1`, pub)
	if err != nil {
		return nil, fmt.Errorf("list tables of publication %s: %w", pub, err)
	}
	out := make(map[change.ExportID]struct{})
	for rows.Next() {
		var e change.ExportID
		if err := rows.Scan(&e.Schema, &e.Table); err != nil {
			return nil, err
		}
		out[e] = struct{}{}
	}
	return out, rows.Err()
}

// PartitionLeaves returns, for each partitioned table the publication publishes under its own
// name (publish_via_partition_root), the OIDs of its leaf partitions, comma-separated in order.
func PartitionLeaves(ctx context.Context, conn Querier, pub string) (map[change.ExportID]string, error) {
	rows, err := conn.Query(ctx, `SELECT t.schemaname::text, t.tablename::text,
			coalesce((SELECT string_agg(p.relid::oid::text, ',' ORDER BY p.relid::oid)
				FROM pg_catalog.pg_partition_tree(c.oid) p WHERE p.isleaf), '')
		FROM pg_catalog.pg_publication_tables t
		JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
		WHERE t.pubname = $1 AND c.relkind = 'p'`, pub)
	if err != nil {
		return nil, err
	}
	out := make(map[change.ExportID]string)
	var (
		e      change.ExportID
		leaves string
	)
	_, err = pgx.ForEachRow(rows, []any{&e.Schema, &e.Table, &leaves}, func() error {
		out[e] = leaves
		return nil
	})
	return out, err
}

// OutOfLineColumns returns, for each table of the publication whose replica identity is not
// FULL, its published columns that PostgreSQL may store out of line (TOAST: variable length,
// storage other than plain), in attnum order. An update that leaves such a value unchanged does
// not send it. Tables without such columns are left out.
func OutOfLineColumns(ctx context.Context, conn Querier, pub string) (map[change.ExportID][]string, error) {
	// Only the columns the publication publishes (PostgreSQL 15 column lists).
	listed := ""
	if serverMajor(conn) >= 15 {
		listed = " AND (pt.attnames IS NULL OR a.attname = ANY (pt.attnames))"
	}
	rows, err := conn.Query(ctx, `
		SELECT pt.schemaname::text, pt.tablename::text, array_agg(a.attname::text ORDER BY a.attnum)
		FROM pg_publication_tables pt
		JOIN pg_namespace n ON n.nspname = pt.schemaname
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
			AND a.attlen = -1 AND a.attstorage <> 'p' AND a.attgenerated = ''`+listed+`
		WHERE pt.pubname = $1 AND c.relreplident <> 'f'
		GROUP BY 1, 2`, pub)
	if err != nil {
		return nil, err
	}
	out := make(map[change.ExportID][]string)
	var (
		e    change.ExportID
		cols []string
	)
	_, err = pgx.ForEachRow(rows, []any{&e.Schema, &e.Table, &cols}, func() error {
		out[e] = append([]string(nil), cols...)
		return nil
	})
	return out, err
}
