package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The progress table holds one row per applier (APPLY_NAME): the last applied cut's LSN and the
// reader's position after it, and the running count of source transactions applied. The row is
// written in the cut's own transaction, so it always describes exactly what the target holds.
//
//	CREATE TABLE public.tidemark_apply_progress (
//	    name text PRIMARY KEY, lsn text NOT NULL, position text NOT NULL,
//	    txns bigint NOT NULL, applied_at timestamptz NOT NULL)

// ensureProgress creates the progress table when missing. Appliers starting at once (each
// with its APPLY_NAME) take turns under an advisory lock: two concurrent CREATE TABLE IF NOT
// EXISTS of one name collide in pg_type.
func ensureProgress(ctx context.Context, conn *pgx.Conn, table pgx.Identifier) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("create progress table %s: %w", table.Sanitize(), err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('tidemark-apply progress ' || $1))", table.Sanitize()); err != nil {
		return fmt.Errorf("lock for the progress table: %w", err)
	}
	if len(table) == 2 {
		// CREATE SCHEMA checks CREATE on the database before it looks for the schema, even
		// with IF NOT EXISTS: ask first, so that a role without it can use an existing schema.
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", table[0]).Scan(&exists); err != nil {
			return fmt.Errorf("look for the schema of the progress table: %w", err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{table[0]}.Sanitize()); err != nil {
				return fmt.Errorf("create schema of the progress table: %w", err)
			}
		}
	}
	_, err = tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table.Sanitize()+` (
  name text PRIMARY KEY,
  lsn text NOT NULL,
  position text NOT NULL,
  txns bigint NOT NULL,
  applied_at timestamptz NOT NULL)`)
	if err != nil {
		return fmt.Errorf("create progress table %s: %w", table.Sanitize(), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create progress table %s: %w", table.Sanitize(), err)
	}
	return nil
}

// progress is an applier's row of the progress table.
type progress struct {
	lsn      string
	position string
	txns     int64
}

// readProgress returns the applier's row; found is false before its first cut.
func readProgress(ctx context.Context, conn *pgx.Conn, table pgx.Identifier, name string) (p progress, found bool, err error) {
	err = conn.QueryRow(ctx, "SELECT lsn, position, txns FROM "+table.Sanitize()+" WHERE name = $1", name).
		Scan(&p.lsn, &p.position, &p.txns)
	if errors.Is(err, pgx.ErrNoRows) {
		return progress{}, false, nil
	}
	if err != nil {
		return progress{}, false, fmt.Errorf("read progress: %w", err)
	}
	return p, true, nil
}
