package replication

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

// The replication stage owns the main slot and the publication it reads: their administration
// lives here, beside the stage.

// ErrSetup marks an error that a retry cannot fix: the server, the role, the publication or
// the slot needs a person (the message says what to do). It is pgcat.ErrSetup: the catalog's
// set-up checks (pgcat.EnsurePublication) and the slot's match the same sentinel.
var ErrSetup = pgcat.ErrSetup

// CheckServer verifies what logical replication needs and says how to fix what is missing.
func CheckServer(ctx context.Context, conn pgcat.Querier) error {
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
		problems = append(problems, fmt.Errorf("role %q lacks the REPLICATION attribute; run ALTER ROLE %s REPLICATION", user, pgcat.Ident(user)))
	}
	return pgcat.SetupError(errors.Join(problems...))
}

// SlotInfo is the main slot's state.
type SlotInfo struct {
	Exists    bool
	Confirmed change.LSN
	WALStatus string
	Active    bool
}

// ReadSlot reads slot's state; Exists is false when there is no such slot.
func ReadSlot(ctx context.Context, conn pgcat.Querier, slot string) (SlotInfo, error) {
	var s SlotInfo
	var confirmed *string
	var walStatus *string
	err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, wal_status, active FROM pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&confirmed, &walStatus, &s.Active)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read slot %s: %w", slot, err)
	}
	s.Exists = true
	if walStatus != nil {
		s.WALStatus = *walStatus
	}
	if confirmed != nil {
		if s.Confirmed, err = change.ParseLSN(*confirmed); err != nil {
			return s, err
		}
	}
	return s, nil
}

// FailoverMajor is the first PostgreSQL major version with failover slots: a logical slot
// created with FAILOVER is synchronised to a physical standby (sync_replication_slots) and goes
// on from there after the standby's promotion.
const FailoverMajor = 17

// CheckFailover refuses failover slots on a server older than FailoverMajor, with a message
// that says why: asked for explicitly, they must not silently be left out.
func CheckFailover(conn pgcat.Querier) error {
	v := conn.PgConn().ParameterStatus("server_version")
	if m := pgcat.ServerMajor(v); m < FailoverMajor {
		return pgcat.SetupError(fmt.Errorf("CDC_SLOT_FAILOVER=true needs PostgreSQL %d or later (failover slots); the server is %s: upgrade it, or set CDC_SLOT_FAILOVER=false", FailoverMajor, v))
	}
	return nil
}

// CreateSlot creates the main slot on a replication connection (no exported snapshot: the
// snapshot stage takes its own consistent points); failover creates it with FAILOVER
// (PostgreSQL 17+, see CheckFailover). Only the connection attempt is bounded by t: the
// creation waits for open transactions, as long as ctx allows.
func CreateSlot(ctx context.Context, url, slot string, failover bool, t pgcat.Timeouts) error {
	conn, err := dialReplication(ctx, url, t)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if failover {
		// pglogrepl knows no FAILOVER option: the options-list syntax (PostgreSQL 15+).
		sql := fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER)", pgcat.Ident(slot))
		_, err = pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, sql))
	} else {
		_, err = pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "NOEXPORT_SNAPSHOT"})
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "53400" {
			return pgcat.SetupError(fmt.Errorf("create replication slot %s: all replication slots are in use; raise max_replication_slots or drop unused slots", slot))
		}
		return fmt.Errorf("create replication slot %s: %w", slot, err)
	}
	return nil
}

// SetFailover makes an existing slot a failover slot (ALTER_REPLICATION_SLOT, PostgreSQL 17+):
// a slot created before CDC_SLOT_FAILOVER was turned on. It fails while another process streams
// from the slot.
func SetFailover(ctx context.Context, url, slot string, t pgcat.Timeouts) error {
	conn, err := dialReplication(ctx, url, t)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER_REPLICATION_SLOT %s (FAILOVER true)", pgcat.Ident(slot))).ReadAll(); err != nil {
		return fmt.Errorf("make replication slot %s a failover slot: %w", slot, err)
	}
	return nil
}

// ReadFailover reports whether slot is a failover slot (false before PostgreSQL 17, or when
// there is no such slot).
func ReadFailover(ctx context.Context, conn pgcat.Querier, slot string) (bool, error) {
	if pgcat.ServerMajor(conn.PgConn().ParameterStatus("server_version")) < FailoverMajor {
		return false, nil
	}
	var failover bool
	err := conn.QueryRow(ctx, `SELECT failover FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&failover)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read slot %s: %w", slot, err)
	}
	return failover, nil
}

// AdvanceSlot confirms lsn on the slot without streaming (used at shutdown, once the sink has
// drained and the replication connection is gone).
func AdvanceSlot(ctx context.Context, conn pgcat.Querier, slot string, lsn change.LSN) error {
	_, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)`, slot, lsn.String())
	return err
}

// Holder describes the process that streams from a replication slot.
type Holder struct {
	PID         int32
	Application string
	Client      string
	Since       time.Time
}

func (h Holder) String() string {
	s := fmt.Sprintf("PostgreSQL backend pid %d", h.PID)
	if h.Application != "" {
		s += fmt.Sprintf(" (application %q", h.Application)
		if h.Client != "" {
			s += " from " + h.Client
		}
		s += ")"
	} else if h.Client != "" {
		s += " from " + h.Client
	}
	if !h.Since.IsZero() {
		s += " since " + h.Since.UTC().Format(time.RFC3339)
	}
	return s
}

// SlotHolder returns the process streaming from slot, if any.
func SlotHolder(ctx context.Context, conn pgcat.Querier, slot string) (Holder, bool, error) {
	var h Holder
	var app, client *string
	var since *time.Time
	err := conn.QueryRow(ctx, `
		SELECT s.active_pid, a.application_name, host(a.client_addr) || ':' || a.client_port, a.backend_start
		FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
		WHERE s.slot_name = $1 AND s.active`, slot).Scan(&h.PID, &app, &client, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("read the Holder of slot %s: %w", slot, err)
	}
	if app != nil {
		h.Application = *app
	}
	if client != nil {
		h.Client = *client
	}
	if since != nil {
		h.Since = *since
	}
	return h, true, nil
}

// WaitAsStandby returns once no process streams from the slot: while another instance holds
// it, this one is a standby that takes over when the Holder goes away. It logs who holds the
// slot when it starts waiting and then every standbyLogEvery. Nothing is written to Kafka or
// PostgreSQL while waiting (the transactional producer is initialised only afterwards, so a
// standby never fences the running instance).
func WaitAsStandby(ctx context.Context, conn pgcat.Querier, slot string, poll time.Duration, log *slog.Logger) error {
	var lastLog time.Time
	waited := false
	for {
		h, held, err := SlotHolder(ctx, conn, slot)
		if err != nil {
			return err
		}
		if !held {
			if waited {
				log.Info("replication slot is free; taking over", "slot", slot)
			}
			return nil
		}
		if time.Since(lastLog) >= standbyLogEvery {
			log.Warn("replication slot is held by another process; waiting as a standby", "slot", slot, "Holder", h.String())
			lastLog = time.Now()
		}
		waited = true
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// standbyLogEvery is how often a waiting standby repeats who holds the slot.
const standbyLogEvery = 30 * time.Second

// ReleaseStale ends server process pid when it still holds slot, and waits (a few seconds at
// most) until it let go. pid is the walsender of this process's own earlier replication
// connection: when the path to it died without closing (a proxy that stopped forwarding), it
// would hold the slot until the server's wal_sender_timeout, and no new connection could stream.
// Another process's walsender is never touched: it has another pid. A role may end its own
// role's backends, so no privilege beyond the replication role's is needed.
func ReleaseStale(ctx context.Context, conn *pgconn.PgConn, slot string, pid uint32, log *slog.Logger) error {
	if pid == 0 {
		return nil
	}
	q := fmt.Sprintf("SELECT pg_catalog.pg_terminate_backend(active_pid) FROM pg_catalog.pg_replication_slots WHERE slot_name = %s AND active_pid = %d",
		pgcat.Literal(slot), pid)
	res, err := conn.Exec(ctx, q).ReadAll()
	if err != nil {
		return fmt.Errorf("end the stale holder of slot %s: %w", slot, err)
	}
	if len(res) == 0 || len(res[0].Rows) == 0 {
		return nil // it is gone already
	}
	log.Info("the server process of an earlier replication connection of this instance still holds the slot (its path died without closing); ended it",
		"slot", slot, "pid", pid)
	check := fmt.Sprintf("SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = %s AND active_pid = %d", pgcat.Literal(slot), pid)
	for range 50 {
		res, err := conn.Exec(ctx, check).ReadAll()
		if err != nil {
			return fmt.Errorf("wait for the stale holder of slot %s: %w", slot, err)
		}
		if len(res) == 0 || len(res[0].Rows) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Timeline is where a server stands in its WAL history. A promoted standby starts a new
// timeline: its WAL is the old primary's up to SwitchPoint, and its own after it. LSNs go on
// from there, so they stay comparable across the promotion.
type Timeline struct {
	ID int32
	// SwitchPoint is the LSN at which timeline ID branched off its parent (the promotion);
	// 0/0 on timeline 1, which has no parent.
	SwitchPoint change.LSN
}

// ReadTimeline reads the server's timeline (IDENTIFY_SYSTEM) and, when it has a parent, the
// point where it branched off (TIMELINE_HISTORY), on a replication connection of its own.
func ReadTimeline(ctx context.Context, url string, t pgcat.Timeouts) (Timeline, error) {
	conn, err := dialReplication(ctx, url, t)
	if err != nil {
		return Timeline{}, err
	}
	defer conn.Close(context.Background())
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return Timeline{}, fmt.Errorf("identify system: %w", err)
	}
	tl := Timeline{ID: sys.Timeline}
	if tl.ID <= 1 {
		return tl, nil
	}
	hist, err := pglogrepl.TimelineHistory(ctx, conn, tl.ID)
	if err != nil {
		return Timeline{}, fmt.Errorf("timeline %d history: %w", tl.ID, err)
	}
	if tl.SwitchPoint, err = switchPoint(string(hist.Content)); err != nil {
		return Timeline{}, fmt.Errorf("timeline %d history %s: %w", tl.ID, hist.FileName, err)
	}
	return tl, nil
}

// switchPoint returns the switch point on the last line of a timeline history file: lines of
// "parent timeline, tab, LSN where it ended, tab, reason"; comments start with #.
func switchPoint(history string) (change.LSN, error) {
	var last string
	for _, line := range strings.Split(history, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			last = line
		}
	}
	fields := strings.Fields(last)
	if len(fields) < 2 {
		return 0, fmt.Errorf("no switch point in %q", history)
	}
	return change.ParseLSN(fields[1])
}

// dialReplication opens a replication connection for one command; only the connection attempt
// is bounded by t. A bad URL is a setup error; a failure to connect names no secret.
func dialReplication(ctx context.Context, url string, t pgcat.Timeouts) (*pgconn.PgConn, error) {
	cfg, err := pgcat.ReplicationConfig(url, "", t.ConnectOnly())
	if err != nil {
		return nil, pgcat.SetupError(err)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection: %w", secret.ScrubError(err, url))
	}
	return conn, nil
}
