package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/watermark"
)

// source is the server CDC_PG_URL names, as start-up found it: a primary, or a hot standby
// (PostgreSQL 16+) whose slot, stream and copies live there, with or without a connection to
// its primary (Config.PrimaryURL) for what a standby cannot write.
type source struct {
	standby bool
	// primary is the connection to the primary when the source is a standby and
	// Config.PrimaryURL is set; nil otherwise.
	primary *pgcat.Conn
}

func (s *source) close() {
	if s.primary != nil {
		s.primary.Close(context.Background())
		s.primary = nil
	}
}

// standbyDoc is where the documentation explains capture from a standby.
const standbyDoc = "docs/production.md#capture-from-a-standby"

// primaryNudge is how often, while a slot is created on a standby, the primary is asked for a
// running-transactions record.
const primaryNudge = 200 * time.Millisecond

// checkSource finds out whether conn is a hot standby and, if so, refuses what cannot work on
// it and opens the connection to the primary.
func checkSource(ctx context.Context, cfg Config, conn *pgcat.Conn, log *slog.Logger) (source, error) {
	standby, err := pgcat.InRecovery(ctx, conn)
	if err != nil {
		return source{}, err
	}
	if !standby {
		if cfg.PrimaryURL != "" {
			log.Info("CDC_PG_URL names a primary; CDC_PG_PRIMARY_URL is not used")
		}
		return source{}, nil
	}
	version := conn.PgConn().ParameterStatus("server_version")
	if err := standbyVersion(version); err != nil {
		return source{}, err
	}
	if cfg.SlotFailover {
		return source{}, fatal(pgcat.SetupError(fmt.Errorf("CDC_SLOT_FAILOVER=true, but CDC_PG_URL names a hot standby: a failover slot lives on the primary and is synchronised to standbys; set CDC_SLOT_FAILOVER=false to capture from the standby, or point CDC_PG_URL at the primary (%s)", standbyDoc)))
	}
	var feedback, primarySlot string
	if err := conn.QueryRow(ctx, `SELECT current_setting('hot_standby_feedback'), current_setting('primary_slot_name')`).Scan(&feedback, &primarySlot); err != nil {
		return source{}, fmt.Errorf("read the standby's settings: %w", err)
	}
	if feedback != "on" || primarySlot == "" {
		log.Warn("the standby does not hold back the primary's catalog cleanup (hot_standby_feedback = on and primary_slot_name are both needed): the primary may remove catalog rows the slot still needs, and PostgreSQL then invalidates the slot (every table must be copied again)",
			"hot_standby_feedback", feedback, "primary_slot_name", primarySlot, "doc", standbyDoc)
	}
	if cfg.PrimaryURL == "" {
		log.Info("CDC_PG_URL names a hot standby: the slot, the stream and the copies are there; CDC_PG_PRIMARY_URL is not set, so nothing is written on the primary: tables are copied with the copy strategy, and creating a slot waits for the primary's next running-transactions record",
			"version", version, "doc", standbyDoc)
		return source{standby: true}, nil
	}
	primary, err := connect(ctx, cfg.PrimaryURL, cfg.timeouts())
	if err != nil {
		return source{}, fmt.Errorf("connect to the primary (CDC_PG_PRIMARY_URL): %w", err)
	}
	src := source{standby: true, primary: primary}
	if err := checkPrimary(ctx, conn, primary); err != nil {
		src.close()
		return source{}, err
	}
	log.Info("CDC_PG_URL names a hot standby: the slot, the stream and the copies are there; the chunked copies' markers and the running-transactions records that slot creation waits for are written through CDC_PG_PRIMARY_URL",
		"version", version, "doc", standbyDoc)
	return src, nil
}

// standbyVersion refuses a standby older than PostgreSQL 16, which cannot decode.
func standbyVersion(version string) error {
	if pgcat.ServerMajor(version) < pgcat.StandbyMajor {
		return fatal(pgcat.SetupError(fmt.Errorf("CDC_PG_URL names a hot standby (PostgreSQL %s, in recovery): logical decoding on a standby needs PostgreSQL %d or later; point CDC_PG_URL at the primary, or upgrade (%s)",
			version, pgcat.StandbyMajor, standbyDoc)))
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
		return fatal(pgcat.SetupError(fmt.Errorf("CDC_PG_PRIMARY_URL names a server in recovery (a standby): it cannot write; point it at the primary (%s)", standbyDoc)))
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
		return fatal(pgcat.SetupError(fmt.Errorf("CDC_PG_PRIMARY_URL names another cluster (system identifier %s) than the standby of CDC_PG_URL (%s): what cdc writes there never reaches the standby; point it at the standby's primary (%s)", theirs, ours, standbyDoc)))
	}
	return nil
}

// checkChunkedOnStandby refuses to go on with a chunked copy that an earlier life began when
// nothing can write its markers now.
func checkChunkedOnStandby(src source, tracker *watermark.Tracker, resume map[change.ExportID]change.LSN) error {
	if !src.standby || src.primary != nil {
		return nil
	}
	for e := range resume {
		if _, _, chunked := tracker.Chunked(e); chunked {
			return fatal(pgcat.SetupError(fmt.Errorf("export %s has a chunked copy in progress, which writes its markers on the primary, and CDC_PG_URL names a standby without CDC_PG_PRIMARY_URL: set CDC_PG_PRIMARY_URL, or point CDC_PG_URL at the primary, until the copy is done (%s)", e, standbyDoc)))
		}
	}
	return nil
}

// createSlot creates the main slot. On a standby the creation waits for a running-transactions
// record from the primary: with a connection to it, cdc asks for one until the slot exists.
func createSlot(ctx context.Context, cfg Config, src source, log *slog.Logger) error {
	if !src.standby {
		return replication.CreateSlot(ctx, cfg.PGURL, cfg.Slot, cfg.SlotFailover, cfg.timeouts())
	}
	if src.primary == nil {
		log.Info("creating the replication slot on the standby: it waits for the primary's next running-transactions record (written every 15 s while the primary has writes; CDC_PG_PRIMARY_URL lets cdc ask for one)",
			"slot", cfg.Slot)
		return replication.CreateSlot(ctx, cfg.PGURL, cfg.Slot, false, cfg.timeouts())
	}
	nctx, stop := context.WithCancel(ctx)
	nudged := make(chan struct{})
	go func() {
		defer close(nudged)
		if err := pgcat.LogStandbySnapshots(nctx, src.primary, primaryNudge); err != nil && nctx.Err() == nil {
			log.Warn("cannot ask the primary for running-transactions records (pg_log_standby_snapshot() is for superusers unless granted); creating the slot on the standby waits for the primary's next one",
				"slot", cfg.Slot, "err", err)
		}
	}()
	err := replication.CreateSlot(ctx, cfg.PGURL, cfg.Slot, false, cfg.timeouts())
	stop()
	<-nudged
	return err
}

// ensurePublication creates the publication or adds the configured tables (CDC_TABLES) where
// that can be written: on the primary when the source is a standby, which then waits until it
// has replayed the change.
func ensurePublication(ctx context.Context, cfg Config, conn *pgcat.Conn, src source) error {
	if src.primary == nil {
		err := pgcat.EnsurePublication(ctx, conn, cfg.Publication, cfg.Tables)
		if src.standby && pgcat.IsReadOnly(err) {
			return fatal(pgcat.SetupError(fmt.Errorf("%w: CDC_PG_URL names a standby, which cannot change publication %s; create it (or add the tables) on the primary, or set CDC_PG_PRIMARY_URL (%s)", err, cfg.Publication, standbyDoc)))
		}
		return err
	}
	if err := pgcat.EnsurePublication(ctx, src.primary, cfg.Publication, cfg.Tables); err != nil {
		return fmt.Errorf("on the primary (CDC_PG_PRIMARY_URL): %w", err)
	}
	at, err := pgcat.CurrentWAL(ctx, src.primary)
	if err != nil {
		return fmt.Errorf("read the primary's WAL position: %w", err)
	}
	return pgcat.WaitReplayed(ctx, conn, at)
}
