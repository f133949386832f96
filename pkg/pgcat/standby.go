package pgcat

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// StandbyMajor is the first PostgreSQL major version that decodes logically on a hot standby:
// a logical slot can live there, and a walsender there streams what the standby has replayed.
const StandbyMajor = 16

// WALPositionSQL is the server's WAL position as an expression: the insert position on a
// primary, the last replayed position on a standby (pg_current_wal_lsn() fails during
// recovery). Everything a standby's slot can stream lies below it.
const WALPositionSQL = `CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_lsn() END`

// WALEndSQL is the end of the WAL the server has written, as an expression: on a primary the
// insert position (pg_current_wal_insert_lsn(), at or past the write and flush positions, so
// past everything a walsender sent or a function returned); on a standby the greater of what it
// received and what it replayed (a walsender there sends no further). No LSN that the server
// ever handed out, to a slot's stream or otherwise, is past it: the hard bound on positions.
const WALEndSQL = `CASE WHEN pg_catalog.pg_is_in_recovery() THEN GREATEST(pg_catalog.pg_last_wal_receive_lsn(), pg_catalog.pg_last_wal_replay_lsn()) ELSE pg_catalog.pg_current_wal_insert_lsn() END`

// WALEnd returns the server's WALEndSQL and whether it is a standby (in recovery).
func WALEnd(ctx context.Context, q Querier) (change.LSN, bool, error) {
	var at string
	var standby bool
	if err := q.QueryRow(ctx, `SELECT (`+WALEndSQL+`)::text, pg_catalog.pg_is_in_recovery()`).Scan(&at, &standby); err != nil {
		return 0, false, fmt.Errorf("read the end of the WAL: %w", err)
	}
	lsn, err := change.ParseLSN(at)
	if err != nil {
		return 0, false, fmt.Errorf("read the end of the WAL: %w", err)
	}
	return lsn, standby, nil
}

// InRecovery reports whether q is connected to a standby (a server in recovery).
func InRecovery(ctx context.Context, q Querier) (bool, error) {
	var standby bool
	if err := q.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&standby); err != nil {
		return false, fmt.Errorf("read whether PostgreSQL is a standby: %w", err)
	}
	return standby, nil
}

// SystemIdentifier is the server's cluster identity (pg_control_system()): a primary and the
// physical standbys made from it share it.
func SystemIdentifier(ctx context.Context, q Querier) (string, error) {
	var id string
	if err := q.QueryRow(ctx, `SELECT system_identifier::text FROM pg_catalog.pg_control_system()`).Scan(&id); err != nil {
		return "", fmt.Errorf("read system identifier: %w", err)
	}
	return id, nil
}

// WaitReplayed returns once the standby q is connected to has replayed the WAL up to lsn (at
// once on a primary): from then on its snapshots see every transaction that committed below
// lsn, and its slots can stream up to there.
func WaitReplayed(ctx context.Context, q Querier, lsn change.LSN) error {
	pause := time.Millisecond
	for {
		var at string
		if err := q.QueryRow(ctx, `SELECT (`+WALPositionSQL+`)::text`).Scan(&at); err != nil {
			return fmt.Errorf("read replay position: %w", err)
		}
		pos, err := change.ParseLSN(at)
		if err != nil {
			return fmt.Errorf("read replay position: %w", err)
		}
		if pos >= lsn {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// LogStandbySnapshots writes a running-transactions record on the primary q
// (pg_log_standby_snapshot()) every interval until ctx ends. Creating a logical slot on a
// standby waits for such a record; without one the primary writes it only every 15 s while it
// has other writes, and not at all while it has none. It returns ctx's end, or the first error.
func LogStandbySnapshots(ctx context.Context, q Querier, every time.Duration) error {
	for {
		if _, err := q.Exec(ctx, `SELECT pg_catalog.pg_log_standby_snapshot()`); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("pg_log_standby_snapshot() on the primary: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// IsReadOnly reports whether PostgreSQL refused err's statement because it cannot write there:
// the server is a standby (SQLSTATE 25006, read_only_sql_transaction).
func IsReadOnly(err error) bool {
	code, ok := SQLState(err)
	return ok && code == "25006"
}
