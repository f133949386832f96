package replication

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// Source is the server CDC_PG_URL names, as start-up found it: a primary, or a hot standby
// (PostgreSQL 16+) whose slot, stream and copies live there, with or without a connection to
// its primary (SourceConfig.PrimaryURL) for what a standby cannot write.
type Source struct {
	Standby bool
	// Primary is the connection to the primary when the source is a standby and
	// SourceConfig.PrimaryURL is set; nil otherwise.
	Primary *pgcat.Conn
}

// SourceConfig is what OpenSource needs besides the server's connection.
type SourceConfig struct {
	// PrimaryURL is CDC_PG_PRIMARY_URL: the primary of a standby source, for what a standby
	// cannot write.
	PrimaryURL string
	// SlotFailover is CDC_SLOT_FAILOVER, refused on a standby.
	SlotFailover bool
	Timeouts     pgcat.Timeouts
	Logger       *slog.Logger
}

// Close closes the connection to the primary, if any.
func (s *Source) Close() {
	if s.Primary != nil {
		s.Primary.Close(context.Background())
		s.Primary = nil
	}
}

// StandbyDoc is where the documentation explains capture from a standby.
const StandbyDoc = "docs/production.md#capture-from-a-standby"

// primaryNudge is how often, while a slot is created on a standby, the primary is asked for a
// running-transactions record.
const primaryNudge = 200 * time.Millisecond

// OpenSource finds out whether conn is a hot standby and, if so, refuses what cannot work on it
// (a setup error, ErrSetup) and opens the connection to the primary.
func OpenSource(ctx context.Context, conn *pgcat.Conn, cfg SourceConfig) (Source, error) {
	log := cfg.Logger
	standby, err := pgcat.InRecovery(ctx, conn)
	if err != nil {
		return Source{}, err
	}
	if !standby {
		if cfg.PrimaryURL != "" {
			log.Info("CDC_PG_URL names a primary; CDC_PG_PRIMARY_URL is not used")
		}
		return Source{}, nil
	}
	version := conn.PgConn().ParameterStatus("server_version")
	if err := standbyVersion(version); err != nil {
		return Source{}, err
	}
	if cfg.SlotFailover {
		return Source{}, pgcat.SetupError(fmt.Errorf("CDC_SLOT_FAILOVER=true, but CDC_PG_URL names a hot standby: a failover slot lives on the primary and is synchronised to standbys; set CDC_SLOT_FAILOVER=false to capture from the standby, or point CDC_PG_URL at the primary (%s)", StandbyDoc))
	}
	var feedback, primarySlot string
	if err := conn.QueryRow(ctx, `SELECT current_setting('hot_standby_feedback'), current_setting('primary_slot_name')`).Scan(&feedback, &primarySlot); err != nil {
		return Source{}, fmt.Errorf("read the standby's settings: %w", err)
	}
	if feedback != "on" || primarySlot == "" {
		log.Warn("the standby does not hold back the primary's catalog cleanup (hot_standby_feedback = on and primary_slot_name are both needed): the primary may remove catalog rows the slot still needs, and PostgreSQL then invalidates the slot (every table must be copied again)",
			"hot_standby_feedback", feedback, "primary_slot_name", primarySlot, "doc", StandbyDoc)
	}
	if cfg.PrimaryURL == "" {
		log.Info("CDC_PG_URL names a hot standby: the slot, the stream and the copies are there; CDC_PG_PRIMARY_URL is not set, so nothing is written on the primary: tables are copied with the copy strategy, and creating a slot waits for the primary's next running-transactions record",
			"version", version, "doc", StandbyDoc)
		return Source{Standby: true}, nil
	}
	primary, err := pgcat.Connect(ctx, cfg.PrimaryURL, cfg.Timeouts)
	if err != nil {
		return Source{}, fmt.Errorf("connect to the primary (CDC_PG_PRIMARY_URL): %w", err)
	}
	src := Source{Standby: true, Primary: primary}
	if err := checkPrimary(ctx, conn, primary); err != nil {
		src.Close()
		return Source{}, err
	}
	log.Info("CDC_PG_URL names a hot standby: the slot, the stream and the copies are there; the chunked copies' markers and the running-transactions records that slot creation waits for are written through CDC_PG_PRIMARY_URL",
		"version", version, "doc", StandbyDoc)
	return src, nil
}

// standbyVersion refuses a standby older than PostgreSQL 16, which cannot decode.
func standbyVersion(version string) error {
	if pgcat.ServerMajor(version) < pgcat.StandbyMajor {
		return pgcat.SetupError(fmt.Errorf("CDC_PG_URL names a hot standby (PostgreSQL %s, in recovery): logical decoding on a standby needs PostgreSQL %d or later; point CDC_PG_URL at the primary, or upgrade (%s)",
			version, pgcat.StandbyMajor, StandbyDoc))
	}
	return nil
}

// checkPrimary refuses a CDC_PG_PRIMARY_URL that is not the standby's primary: a server in
// recovery, or one of another cluster (its markers would never reach the standby).
func checkPrimary(ctx context.Context, standby, primary pgcat.Querier) error {
	inRecovery, err := pgcat.InRecovery(ctx, primary)
	if err != nil {
		return fmt.Errorf("CDC_PG_PRIMARY_URL: %w", err)
	}
	if inRecovery {
		return pgcat.SetupError(fmt.Errorf("CDC_PG_PRIMARY_URL names a server in recovery (a standby): it cannot write; point it at the primary (%s)", StandbyDoc))
	}
	// pg_control_system() may be refused to the role: then the identity is not checked.
	ours, err := pgcat.SystemIdentifier(ctx, standby)
	if err != nil {
		return nil
	}
	theirs, err := pgcat.SystemIdentifier(ctx, primary)
	if err != nil {
		return nil
	}
	if ours != theirs {
		return pgcat.SetupError(fmt.Errorf("CDC_PG_PRIMARY_URL names another cluster (system identifier %s) than the standby of CDC_PG_URL (%s): what cdc writes there never reaches the standby; point it at the standby's primary (%s)", theirs, ours, StandbyDoc))
	}
	return nil
}

// CreateSlot creates the slot on the source url names (failover: CDC_SLOT_FAILOVER, on a
// primary). On a standby the creation waits for a running-transactions record from the primary:
// with a connection to it, cdc asks for one until the slot exists.
func (src Source) CreateSlot(ctx context.Context, url, slot string, failover bool, t pgcat.Timeouts, log *slog.Logger) error {
	if !src.Standby {
		return CreateSlot(ctx, url, slot, failover, t)
	}
	if src.Primary == nil {
		log.Info("creating the replication slot on the standby: it waits for the primary's next running-transactions record (written every 15 s while the primary has writes; CDC_PG_PRIMARY_URL lets cdc ask for one)",
			"slot", slot)
		return CreateSlot(ctx, url, slot, false, t)
	}
	nctx, stop := context.WithCancel(ctx)
	nudged := make(chan struct{})
	go func() {
		defer close(nudged)
		if err := pgcat.LogStandbySnapshots(nctx, src.Primary, primaryNudge); err != nil && nctx.Err() == nil {
			log.Warn("cannot ask the primary for running-transactions records (pg_log_standby_snapshot() is for superusers unless granted); creating the slot on the standby waits for the primary's next one",
				"slot", slot, "err", err)
		}
	}()
	err := CreateSlot(ctx, url, slot, false, t)
	stop()
	<-nudged
	return err
}

// EnsurePublication creates publication pub or adds tables (CDC_TABLES) to it where that can be
// written: on the primary when the source is a standby (conn), which then waits until it has
// replayed the change.
func (src Source) EnsurePublication(ctx context.Context, conn *pgcat.Conn, pub string, tables []change.ExportID) error {
	if src.Primary == nil {
		err := pgcat.EnsurePublication(ctx, conn, pub, tables)
		if src.Standby && pgcat.IsReadOnly(err) {
			return pgcat.SetupError(fmt.Errorf("%w: CDC_PG_URL names a standby, which cannot change publication %s; create it (or add the tables) on the primary, or set CDC_PG_PRIMARY_URL (%s)", err, pub, StandbyDoc))
		}
		return err
	}
	if err := pgcat.EnsurePublication(ctx, src.Primary, pub, tables); err != nil {
		return fmt.Errorf("on the primary (CDC_PG_PRIMARY_URL): %w", err)
	}
	at, err := pgcat.CurrentWAL(ctx, src.Primary)
	if err != nil {
		return fmt.Errorf("read the primary's WAL position: %w", err)
	}
	return pgcat.WaitReplayed(ctx, conn, at)
}

// OtherHolder reports whether another process streams from slot in the seconds after this
// instance let go of it: any Holder but own, the backend of this instance's last replication
// connection (it ends as soon as it notices its connection closed). It connects to url for it.
func OtherHolder(ctx context.Context, url, slot string, own uint32, t pgcat.Timeouts) (Holder, bool) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgcat.Connect(ctx, url, t)
	if err != nil {
		return Holder{}, false
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(otherHolderWindow)
	for time.Now().Before(deadline) {
		h, held, err := SlotHolder(ctx, conn, slot)
		if err != nil {
			return Holder{}, false
		}
		if held && uint32(h.PID) != own {
			return h, true
		}
		select {
		case <-ctx.Done():
			return Holder{}, false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return Holder{}, false
}

// otherHolderWindow is how long a fenced instance watches the slot for the instance that fenced
// it; that one takes the slot as soon as it is free (its standby poll, then its start-up).
const otherHolderWindow = 5 * time.Second
