package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/secret"
)

// ErrNoReplicationCapacity is wrapped by the error of a request that found no free replication
// slot or WAL sender.
var ErrNoReplicationCapacity = errors.New("no free replication slot or wal sender")

// SlotWaitError says that creating the temporary slot waited longer than Config.SlotWaitTimeout
// for transactions that were open when it started.
type SlotWaitError struct {
	Waited time.Duration
	// Blockers describes the transactions seen holding an xid at the last look.
	Blockers []string
}

func (e *SlotWaitError) Error() string {
	b := "none seen (they may have ended just now)"
	if len(e.Blockers) > 0 {
		b = strings.Join(e.Blockers, "; ")
	}
	return fmt.Sprintf("create temporary replication slot: gave up after %s waiting for open transactions to finish (CDC_SLOT_WAIT_TIMEOUT); blocked by: %s", e.Waited.Round(time.Second), b)
}

// How slot creation waits are reported.
const (
	slotWaitQuiet = 3 * time.Second
	slotWaitEvery = 10 * time.Second
)

// exporter is the replication connection that holds the temporary slot and exports its snapshot.
type exporter struct {
	conn       *pgconn.PgConn
	slot       string
	c          change.LSN
	snapshotID string
}

// close commits the exporting transaction (dropping the temporary slot) and closes the connection.
func (x *exporter) close(ctx context.Context) error {
	if x == nil || x.conn == nil {
		return nil
	}
	_, err := x.conn.Exec(ctx, "COMMIT").ReadAll()
	cerr := x.conn.Close(ctx)
	x.conn = nil
	if err != nil {
		return fmt.Errorf("commit exporting transaction: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("close replication connection: %w", cerr)
	}
	return nil
}

// abort closes the connection without caring for errors; the server drops the slot with it.
func (x *exporter) abort() {
	if x != nil && x.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = x.conn.Close(ctx)
		x.conn = nil
	}
}

// openExporter opens the replication connection, creates the temporary slot inside a REPEATABLE
// READ transaction with USE_SNAPSHOT and exports the snapshot.
func (s *Stage) openExporter(ctx context.Context) (*exporter, error) {
	conn, err := pgconn.ConnectConfig(ctx, &replicationConfig(s.connConfig).Config)
	if err != nil {
		return nil, classifyCapacity(fmt.Errorf("open replication connection: %w", secret.ScrubError(err, s.cfg.ConnString)))
	}
	x := &exporter{conn: conn, slot: fmt.Sprintf("%s_snap_%d", s.cfg.SlotPrefix, conn.PID())}
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").ReadAll(); err != nil {
		x.abort()
		return nil, fmt.Errorf("begin exporting transaction: %w", err)
	}

	res, err := s.createSlotWatched(ctx, conn, x.slot)
	if err != nil {
		x.abort()
		return nil, err
	}
	if x.c, err = change.ParseLSN(res.ConsistentPoint); err != nil {
		x.abort()
		return nil, fmt.Errorf("create temporary replication slot %s: consistent point: %w", x.slot, err)
	}

	rr, err := conn.Exec(ctx, "SELECT pg_catalog.pg_export_snapshot()").ReadAll()
	if err == nil && (len(rr) != 1 || len(rr[0].Rows) != 1 || len(rr[0].Rows[0]) != 1) {
		err = errors.New("unexpected result shape")
	}
	if err != nil {
		x.abort()
		return nil, fmt.Errorf("export snapshot: %w", err)
	}
	x.snapshotID = string(rr[0].Rows[0][0])
	return x, nil
}

// createSlotWatched creates the slot and, while that waits for open transactions, logs what it
// waits for; it gives up after SlotWaitTimeout.
func (s *Stage) createSlotWatched(ctx context.Context, conn *pgconn.PgConn, slot string) (pglogrepl.CreateReplicationSlotResult, error) {
	start := time.Now()
	createCtx, cancel := context.WithTimeout(ctx, s.cfg.SlotWaitTimeout)
	defer cancel()

	type result struct {
		res pglogrepl.CreateReplicationSlotResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := pglogrepl.CreateReplicationSlot(createCtx, conn, slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Temporary: true, SnapshotAction: "USE_SNAPSHOT"})
		done <- result{res, err}
	}()

	var (
		blockers []string
		monitor  *pgx.Conn
	)
	defer func() {
		if monitor != nil {
			_ = monitor.Close(context.Background())
		}
	}()
	if s.cfg.Standby && s.cfg.PrimaryConnString != "" {
		// On a standby the creation waits for a running-transactions record from the primary:
		// ask for them until it is done.
		nctx, stop := context.WithCancel(createCtx)
		nudged := make(chan struct{})
		defer func() { stop(); <-nudged }()
		go func() { defer close(nudged); s.nudgePrimary(nctx, slot) }()
	}
	timer := time.NewTimer(slotWaitQuiet)
	defer timer.Stop()
	for {
		select {
		case r := <-done:
			if r.err == nil {
				return r.res, nil
			}
			if ctx.Err() != nil {
				return r.res, ctx.Err()
			}
			if createCtx.Err() != nil {
				if monitor != nil {
					// One last look, so the error names what blocked to the end.
					lookCtx, lookCancel := context.WithTimeout(ctx, 5*time.Second)
					if b, err := waitBlockers(lookCtx, monitor); err == nil {
						blockers = b
					}
					lookCancel()
				}
				return r.res, &SlotWaitError{Waited: time.Since(start), Blockers: blockers}
			}
			return r.res, classifyCapacity(fmt.Errorf("create temporary replication slot %s: %w", slot, r.err))
		case <-timer.C:
			timer.Reset(slotWaitEvery)
			if s.cfg.Standby {
				// A standby's own sessions hold no xids: what it waits for is the primary's.
				s.log.Warn("slot creation on the standby is waiting for a running-transactions record from the primary (it writes one every 15 s while it has writes, and waits there for transactions that hold an xid)",
					slog.String("slot", slot), slog.Duration("waited", time.Since(start).Round(time.Second)),
					slog.Duration("timeout", s.cfg.SlotWaitTimeout), slog.Bool("asking_primary", s.cfg.PrimaryConnString != ""))
				continue
			}
			if monitor == nil {
				var err error
				monitor, err = pgcat.Dial(createCtx, workerConfig(s.connConfig, s.cfg.Timeouts))
				if err != nil {
					err = secret.ScrubError(err, s.cfg.ConnString)
					s.log.Warn("slot creation is waiting; cannot connect to look at open transactions",
						slog.String("slot", slot), slog.Duration("waited", time.Since(start).Round(time.Second)), slog.Any("error", err))
					monitor = nil
					continue
				}
			}
			b, err := waitBlockers(createCtx, monitor)
			if err != nil {
				s.log.Warn("slot creation is waiting; cannot list open transactions",
					slog.String("slot", slot), slog.Any("error", err))
				continue
			}
			blockers = b
			s.log.Warn("slot creation is waiting for transactions that hold an xid to finish",
				slog.String("slot", slot), slog.Duration("waited", time.Since(start).Round(time.Second)),
				slog.Duration("timeout", s.cfg.SlotWaitTimeout), slog.Any("transactions", blockers))
		}
	}
}

// waitBlockers lists the transactions holding an xid: sessions of pg_stat_activity and prepared
// transactions.
func waitBlockers(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT format('pid %s (%s, %s, xid %s, started %s): %s',
			pid, coalesce(usename::text, '?'), coalesce(state, '?'), backend_xid,
			to_char(xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
			left(regexp_replace(coalesce(query, ''), '\s+', ' ', 'g'), 200))
		FROM pg_catalog.pg_stat_activity
		WHERE backend_xid IS NOT NULL AND pid <> pg_catalog.pg_backend_pid()
		UNION ALL
		SELECT format('prepared transaction %L (xid %s, owner %s, database %s, prepared %s)',
			gid, transaction, owner, database,
			to_char(prepared AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
		FROM pg_catalog.pg_prepared_xacts`)
	if err != nil {
		return nil, fmt.Errorf("list open transactions: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list open transactions: %w", err)
	}
	return list, nil
}

// classifyCapacity wraps ErrNoReplicationCapacity into errors that say no slot or WAL sender is
// free (SQLSTATE 53400 configuration_limit_exceeded; 53300 too_many_connections on a replication
// connection), with what to change.
func classifyCapacity(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "53400":
		return fmt.Errorf("%w: %w (raise max_replication_slots, or let other hydrations finish)", ErrNoReplicationCapacity, err)
	case "53300":
		return fmt.Errorf("%w: %w (raise max_wal_senders, or max_connections, or let other hydrations finish)", ErrNoReplicationCapacity, err)
	}
	return err
}

// nudgePrimary asks the primary for running-transactions records (pg_log_standby_snapshot)
// until ctx ends, so that a slot's creation on the standby goes on at once.
func (s *Stage) nudgePrimary(ctx context.Context, slot string) {
	cc, err := parseConnConfig(s.cfg.PrimaryConnString, s.cfg.Timeouts)
	if err == nil {
		var conn *pgx.Conn
		if conn, err = pgcat.Dial(ctx, workerConfig(cc, s.cfg.Timeouts)); err == nil {
			defer closeQuietly(conn)
			err = pgcat.LogStandbySnapshots(ctx, conn, standbyNudge)
		}
	}
	if err != nil && ctx.Err() == nil {
		s.log.Warn("cannot ask the primary for running-transactions records (pg_log_standby_snapshot() is for superusers unless granted); slot creation on the standby waits for the primary's next one",
			slog.String("slot", slot), slog.Any("error", secret.ScrubError(err, s.cfg.PrimaryConnString)))
	}
}

// standbyNudge is how often the primary is asked for a running-transactions record while a
// slot is created on its standby.
const standbyNudge = 200 * time.Millisecond
