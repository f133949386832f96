package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// connect opens an ordinary connection with the pinned session settings. Its errors are scrubbed
// of the connection string's passwords.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fatal(fmt.Errorf("parse CDC_PG_URL: %w", secret.ScrubError(err, url)))
	}
	for k, v := range snapshot.SessionParams() {
		cfg.RuntimeParams[k] = v
	}
	cfg.RuntimeParams["application_name"] = "tidemark"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		// The host and database come from the connection string too: a mistyped one may hold
		// a piece of the password.
		return nil, secret.ScrubError(fmt.Errorf("cannot connect to PostgreSQL at %s:%d database %s: %w; check CDC_PG_URL and that the server is running",
			cfg.Host, cfg.Port, cfg.Database, err), url)
	}
	return conn, nil
}

// checkServer verifies what logical replication needs and says how to fix what is missing.
func checkServer(ctx context.Context, conn *pgx.Conn) error {
	var walLevel string
	var canReplicate bool
	var user string
	err := conn.QueryRow(ctx, `SELECT current_setting('wal_level'), r.rolreplication OR r.rolsuper, current_user
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&walLevel, &canReplicate, &user)
	if err != nil {
		return fmt.Errorf("check server settings: %w", err)
	}
	var problems []error
	if walLevel != "logical" {
		problems = append(problems, fmt.Errorf("PostgreSQL has wal_level=%s; set wal_level=logical (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)", walLevel))
	}
	if !canReplicate {
		problems = append(problems, fmt.Errorf("role %q lacks the REPLICATION attribute; run ALTER ROLE %s REPLICATION", user, pgx.Identifier{user}.Sanitize()))
	}
	return fatal(errors.Join(problems...))
}

// ensurePublication creates the publication or adds missing tables when tables are
// configured; otherwise it checks that the publication exists.
func ensurePublication(ctx context.Context, conn *pgx.Conn, pub string, tables []change.ExportID) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, pub).Scan(&exists); err != nil {
		return fmt.Errorf("read publication %s: %w", pub, err)
	}
	if len(tables) == 0 {
		if !exists {
			return fatal(fmt.Errorf("publication %q does not exist; create it (CREATE PUBLICATION %s FOR TABLE ...) or set CDC_TABLES so Tidemark creates it",
				pub, pgx.Identifier{pub}.Sanitize()))
		}
		return nil
	}
	var problems []error
	for _, t := range tables {
		if err := checkIdentity(ctx, conn, t); err != nil {
			problems = append(problems, err)
		}
	}
	if err := errors.Join(problems...); err != nil {
		return fatal(err)
	}
	if !exists {
		names := make([]string, len(tables))
		for i, t := range tables {
			names[i] = t.Quoted()
		}
		_, err := conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{pub}.Sanitize(), strings.Join(names, ", ")))
		if err != nil {
			return fatal(fmt.Errorf("create publication %s: %w", pub, err))
		}
		return nil
	}
	current, err := publishedTables(ctx, conn, pub)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, ok := current[t]; ok {
			continue
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pgx.Identifier{pub}.Sanitize(), t.Quoted())); err != nil {
			return fatal(fmt.Errorf("add %s to publication %s: %w", t, pub, err))
		}
	}
	return nil
}

// checkIdentity refuses a table PostgreSQL would stop accepting UPDATE and DELETE on once it is
// published: one with neither a primary key nor a replica identity.
func checkIdentity(ctx context.Context, conn *pgx.Conn, t change.ExportID) error {
	var ident string
	var hasPK bool
	err := conn.QueryRow(ctx, `SELECT c.relreplident::text, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r','p')`,
		t.Schema, t.Table).Scan(&ident, &hasPK)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("CDC_TABLES names %s, which does not exist", t)
	}
	if err != nil {
		return fmt.Errorf("read replica identity of %s: %w", t, err)
	}
	if ident == "n" || (ident == "d" && !hasPK) {
		return fmt.Errorf("table %s has no primary key or replica identity, so PostgreSQL would reject UPDATE and DELETE on it once published; add a primary key, or run ALTER TABLE %s REPLICA IDENTITY FULL", t, t.Quoted())
	}
	return nil
}

// publishedTables lists the tables of the publication.
func publishedTables(ctx context.Context, conn *pgx.Conn, pub string) (map[change.ExportID]struct{}, error) {
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

// slotInfo is the main slot's state.
type slotInfo struct {
	exists    bool
	confirmed change.LSN
	walStatus string
	active    bool
}

func readSlot(ctx context.Context, conn *pgx.Conn, slot string) (slotInfo, error) {
	var s slotInfo
	var confirmed *string
	var walStatus *string
	err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, wal_status, active FROM pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&confirmed, &walStatus, &s.active)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read slot %s: %w", slot, err)
	}
	s.exists = true
	if walStatus != nil {
		s.walStatus = *walStatus
	}
	if confirmed != nil {
		if s.confirmed, err = change.ParseLSN(*confirmed); err != nil {
			return s, err
		}
	}
	return s, nil
}

// createSlot creates the main slot on a replication connection (NOEXPORT_SNAPSHOT: the
// snapshot stage takes its own consistent points).
func createSlot(ctx context.Context, url, slot string) error {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return fatal(fmt.Errorf("parse CDC_PG_URL: %w", secret.ScrubError(err, url)))
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("replication connection: %w", secret.ScrubError(err, url))
	}
	defer conn.Close(context.Background())
	_, err = pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "53400" {
			return fatal(fmt.Errorf("create replication slot %s: all replication slots are in use; raise max_replication_slots or drop unused slots", slot))
		}
		return fmt.Errorf("create replication slot %s: %w", slot, err)
	}
	return nil
}

// advanceSlot confirms lsn on the slot without streaming (used at shutdown, once the sink has
// drained and the replication connection is gone).
func advanceSlot(ctx context.Context, conn *pgx.Conn, slot string, lsn change.LSN) error {
	_, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)`, slot, lsn.String())
	return err
}

// currentWAL is the server's current WAL insert position.
func currentWAL(ctx context.Context, conn *pgx.Conn) (change.LSN, error) {
	var s string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, err
	}
	return change.ParseLSN(s)
}
