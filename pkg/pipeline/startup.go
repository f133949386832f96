package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// runOnce is one life of the pipeline: start-up, the stages, an orderly stop.
func runOnce(ctx context.Context, cfg Config, life *lifeRegistry, attempt int) error {
	reg := prometheus.NewRegistry()
	life.current.Store(reg)
	// When ctx ends, an orderly stop begins: its steps share ShutdownTimeout from then.
	var stopAt atomic.Int64
	defer context.AfterFunc(ctx, func() { stopAt.Store(time.Now().UnixNano()) })()
	pl, err := startUp(ctx, cfg, life, reg, attempt)
	if err != nil {
		return err
	}
	defer pl.close()
	if pl.src.Standby && pl.src.Primary == nil && cfg.SnapshotStrategy.OrDefault() == snapshot.StrategyChunked {
		// The chunked strategy writes its markers into the WAL; a standby cannot.
		cfg.Logger.Info("tables are copied with the copy strategy: CDC_PG_URL names a standby, and the chunked strategy writes its markers on the primary (CDC_PG_PRIMARY_URL is not set)",
			"stage", "pipeline", "doc", replication.StandbyDoc)
		cfg.SnapshotStrategy = snapshot.StrategyCopy
	}
	s, err := build(cfg, life, reg, attempt, pl)
	if err != nil {
		return err
	}
	return s.run(ctx, &stopAt)
}

// plan is what start-up found and opened: the connection it checked the server on, the sink
// (initialised, the watermark topic read), the published tables, the tracker restored from the
// watermark topic and the slot, and the encoding every stage shares.
type plan struct {
	conn       *pgcat.Conn
	sk         *sink.Sink
	published  map[change.ExportID]struct{}
	tracker    *watermark.Tracker
	checkpoint *watermark.Checkpoint
	slot       replication.SlotInfo
	src        replication.Source
	timeline   replication.Timeline
	resume     map[change.ExportID]change.LSN
	codec      codec.Config
	markerTag  string
	// types loads type descriptions for the codec's catalog, on a connection of its own.
	types *typeLoader
}

func (pl *plan) close() {
	pl.src.Close()
	if pl.sk != nil {
		pl.sk.Close()
	}
	if pl.conn != nil {
		pl.conn.Close(context.Background())
	}
	if pl.types != nil {
		pl.types.close()
	}
}

// TransactionalID is cdc's Kafka transactional id in exactly-once mode: one per source database
// and slot, so that a second instance on the same slot fences the first. Kafka ACLs grant it
// (docs/production.md, "Kafka ACLs: least privilege").
func TransactionalID(database, slot string) string { return "tidemark-" + database + "-" + slot }

// startUp checks everything PostgreSQL and Kafka must say yes to, restores the tracker from the
// watermark topic and makes sure the slot exists and lost nothing. Each step fills in pl.
func startUp(ctx context.Context, cfg Config, life *lifeRegistry, reg prometheus.Registerer, attempt int) (_ *plan, err error) {
	pl := &plan{}
	defer func() {
		if err != nil {
			pl.close()
		}
	}()
	database, err := pl.openServer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pl.openSink(ctx, cfg, life, database); err != nil {
		return nil, err
	}
	// Everything PostgreSQL must say yes to, before anything is created in Kafka.
	if err := pl.readPublication(ctx, cfg); err != nil {
		return nil, err
	}
	if err := pl.takeOver(ctx, cfg, life); err != nil {
		return nil, err
	}
	if err := pl.restore(ctx, cfg); err != nil {
		return nil, err
	}
	if err := pl.ensureSlot(ctx, cfg); err != nil {
		return nil, err
	}
	// The WAL markers of this life's chunked copies: earlier lives and other instances write
	// their own.
	pl.markerTag = fmt.Sprintf("%s/%d/%d/%d", cfg.Slot, os.Getpid(), attempt, time.Now().UnixNano())
	pl.codec = codec.Config{Database: database, TopicPrefix: cfg.TopicPrefix, Tombstones: true,
		// Room for the key and headers within what Kafka accepts.
		MaxRecordBytes: sink.MaxRecordBytes - 64<<10,
		Format:         cfg.ValueFormat,
		// One catalog for every stage, so the snapshot and the stream build identical encoders.
		Types:       codec.NewTypes(pl.types.load),
		Unchanged:   cfg.UnchangedToast,
		Placeholder: cfg.UnchangedPlaceholder,
		Registry:    cfg.Registry,
	}
	return pl, nil
}

// openServer connects to PostgreSQL and checks the server and the source (primary or standby);
// it returns the database's name.
func (pl *plan) openServer(ctx context.Context, cfg Config) (string, error) {
	pl.types = newTypeLoader(cfg.PGURL, cfg.timeouts())
	conn, err := connect(ctx, cfg.PGURL, cfg.timeouts())
	if err != nil {
		return "", err
	}
	pl.conn = conn
	if err := replication.CheckServer(ctx, conn); err != nil {
		return "", err
	}
	if cfg.SlotFailover {
		if err := replication.CheckFailover(conn); err != nil {
			return "", err
		}
	}
	pl.src, err = replication.OpenSource(ctx, conn, replication.SourceConfig{PrimaryURL: cfg.PrimaryURL,
		SlotFailover: cfg.SlotFailover, Timeouts: cfg.timeouts(), Logger: cfg.Logger.With("stage", "pipeline")})
	if errors.Is(err, replication.ErrSetup) || errors.Is(err, pgcat.ErrConfig) {
		return "", fatal(err)
	}
	if err != nil {
		return "", err
	}
	var database string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&database); err != nil {
		return "", fmt.Errorf("read database name: %w", err)
	}
	return database, nil
}

// openSink makes the sink and checks that Kafka answers.
func (pl *plan) openSink(ctx context.Context, cfg Config, life *lifeRegistry, database string) error {
	skCfg := cfg.Sink
	skCfg.TransactionalID = TransactionalID(database, cfg.Slot)
	skCfg.DialTimeout, skCfg.MaxBatchBytes, skCfg.MaxBulkBatchBytes = cfg.ConnectTimeout, sinkBatchBytes, sinkBulkBatchBytes
	// Process-wide: the sink's counters survive the restart that its errors cause.
	skCfg.Logger, skCfg.Registerer = cfg.Logger, life.base
	sk, err := sink.New(skCfg)
	if err != nil {
		return fatal(err)
	}
	pl.sk = sk
	return sk.Ping(ctx)
}

// readPublication makes sure the publication is there and reads the tables it publishes.
func (pl *plan) readPublication(ctx context.Context, cfg Config) error {
	if err := pl.src.EnsurePublication(ctx, pl.conn, cfg.Publication, cfg.Tables); err != nil {
		return err
	}
	published, err := pgcat.PublishedTables(ctx, pl.conn, cfg.Publication)
	if err != nil {
		return err
	}
	exports := make([]change.ExportID, 0, len(published))
	for e := range published {
		exports = append(exports, e)
	}
	if err := change.CheckTopicCollisions(cfg.TopicPrefix, exports); err != nil {
		return fatal(err)
	}
	pl.published = published
	return nil
}

// takeOver makes this instance the slot's one: a stale walsender of this process's previous
// life is ended, another instance that streams from the slot is waited for, and then the
// producer is initialised (which fences that instance's transactions) and the watermark topic
// made.
func (pl *plan) takeOver(ctx context.Context, cfg Config, life *lifeRegistry) error {
	log := cfg.Logger.With("stage", "pipeline")
	// A walsender of this process's previous life that still holds the slot lost its path
	// without a close: end it, or this instance would wait for itself as a standby.
	if err := replication.ReleaseStale(ctx, pl.conn.PgConn(), cfg.Slot, life.walsender.Load(), log); err != nil {
		return err
	}
	if err := replication.WaitAsStandby(ctx, pl.conn, cfg.Slot, cfg.StandbyPoll, log); err != nil {
		return err
	}
	if err := pl.sk.Init(ctx); err != nil {
		return err
	}
	return pl.sk.EnsureTopics(ctx, []sink.TopicSpec{{Name: cfg.Sink.WatermarkTopic, Compact: true}})
}

// restore reads the server's timeline and the watermark topic into a new tracker. The topic is
// folded as it is read (only each export's latest record is kept, whatever the topic's age), and
// every value is checked against the end of the server's WAL (restorecheck.go).
func (pl *plan) restore(ctx context.Context, cfg Config) error {
	timeline, err := replication.ReadTimeline(ctx, cfg.PGURL, cfg.timeouts())
	if err != nil {
		return err
	}
	pl.timeline = timeline
	wmRead := watermark.NewTopicReader()
	var primary pgcat.Querier
	if pl.src.Primary != nil {
		primary = pl.src.Primary
	}
	guard := newRestoreGuard(pl.conn, primary)
	if err := guard.start(ctx, wmRead); err != nil {
		return err
	}
	if err := pl.sk.ReadWatermarks(ctx, guard.add(ctx, wmRead)); err != nil {
		if guard.err != nil {
			return guard.err
		}
		var bad *sink.RecordError
		if errors.As(err, &bad) {
			if past, ok := errors.AsType[*pastWALError](err); ok {
				return refuseRestore(cfg, bad, past, timeline)
			}
			// A record this build cannot read (too large, not a watermark record, a newer
			// version): retrying reads the same record again.
			return fatal(fmt.Errorf("watermark topic: %w", err))
		}
		return fmt.Errorf("read watermark topic %s: %w", cfg.Sink.WatermarkTopic, err)
	}
	recs, checkpoint := wmRead.Result()
	pl.tracker = watermark.NewTracker(cfg.Watermark)
	pl.tracker.Restore(recs)
	if checkpoint != nil {
		pl.tracker.RestoreCheckpoint(checkpoint.Position)
	}
	pl.checkpoint = checkpoint
	pl.resume = pl.tracker.Resume()
	return checkChunkedOnStandby(pl.src, pl.tracker, pl.resume)
}

// ensureSlot reads the slot, refuses one that lost changes or that Kafka is past on a promoted
// server, and creates it (or makes it a failover slot) as configured.
func (pl *plan) ensureSlot(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	slot, err := replication.ReadSlot(ctx, pl.conn, cfg.Slot)
	if err != nil {
		return err
	}
	if err := checkSlot(cfg, slot, pl.timeline, withoutUnstarted(pl.tracker, pl.resume), pl.published); err != nil {
		return err
	}
	if err := checkPromotion(cfg, slot, pl.timeline, pl.checkpoint, pl.resume, pl.published); err != nil {
		return err
	}
	pl.slot = slot
	if !slot.Exists {
		if err := pl.src.CreateSlot(ctx, cfg.PGURL, cfg.Slot, cfg.SlotFailover, cfg.timeouts(), log.With("stage", "pipeline")); err != nil {
			return err
		}
		if pl.slot, err = replication.ReadSlot(ctx, pl.conn, cfg.Slot); err != nil {
			return err
		}
		log.Info("created replication slot", "slot", cfg.Slot, "lsn", pl.slot.Confirmed.String(), "failover", cfg.SlotFailover)
		return nil
	}
	if !cfg.SlotFailover {
		return nil
	}
	failover, err := replication.ReadFailover(ctx, pl.conn, cfg.Slot)
	if err != nil || failover {
		return err
	}
	if err := replication.SetFailover(ctx, cfg.PGURL, cfg.Slot, cfg.timeouts()); err != nil {
		return err
	}
	log.Info("made the replication slot a failover slot", "slot", cfg.Slot)
	return nil
}

// withoutUnstarted returns resume without the chunked copies that have nothing durable: own
// position 0 and no chunk done, as a first life leaves them when it stops before anything of
// the table reached Kafka (a schema registry it could not use, say). Such a copy starts again
// from its first chunk, reading the table as it is now, so no change the slot passed is lost
// to it, wherever the slot is confirmed.
func withoutUnstarted(tr *watermark.Tracker, resume map[change.ExportID]change.LSN) map[change.ExportID]change.LSN {
	out := make(map[change.ExportID]change.LSN, len(resume))
	for e, p := range resume {
		if _, after, chunked := tr.Chunked(e); chunked && p == 0 && len(after) == 0 {
			continue
		}
		out[e] = p
	}
	return out
}

// checkSlot fails loudly when changes were lost: a missing or invalidated slot while exports
// are hydrated, or a slot confirmed past a hydrated export's own position.
func checkSlot(cfg Config, slot replication.SlotInfo, tl replication.Timeline, resume map[change.ExportID]change.LSN, published map[change.ExportID]struct{}) error {
	live := 0
	for e := range resume {
		if _, ok := published[e]; ok {
			live++
		}
	}
	if live == 0 {
		if slot.WALStatus == "lost" {
			return fatal(fmt.Errorf("replication slot %q was invalidated (wal_status=lost); drop it (SELECT pg_drop_replication_slot('%s')) and restart to take a new snapshot", cfg.Slot, cfg.Slot))
		}
		return nil
	}
	if !slot.Exists {
		why := "dropped"
		if tl.ID > 1 {
			why = fmt.Sprintf("this server was promoted at %s (timeline %d) without a synchronised copy of it: not a failover slot (CDC_SLOT_FAILOVER), or not synced yet; docs/production.md#failover", tl.SwitchPoint, tl.ID)
		}
		return fatal(fmt.Errorf("replication slot %q is missing (%s) but %d tables were published from it: changes since it was last confirmed are lost. cdc does not guess and stops: to start over, delete the watermark topic %s (or use a new CDC_TOPIC_PREFIX) so every table is copied again", cfg.Slot, why, live, cfg.Sink.WatermarkTopic))
	}
	if slot.WALStatus == "lost" {
		return fatal(fmt.Errorf("replication slot %q was invalidated (wal_status=lost, max_slot_wal_keep_size exceeded): changes are lost; drop the slot and delete the watermark topic %s to take a new snapshot", cfg.Slot, cfg.Sink.WatermarkTopic))
	}
	for e, p := range resume {
		if _, ok := published[e]; ok && slot.Confirmed > p {
			return fatal(fmt.Errorf("replication slot %q is confirmed at %s, past export %s's own position %s: changes in between are lost; delete the watermark topic %s to take a new snapshot", cfg.Slot, slot.Confirmed, e, p, cfg.Sink.WatermarkTopic))
		}
	}
	return nil
}

// checkPromotion compares what Kafka holds with the WAL of a promoted server whose slot was
// not confirmed since the promotion (the synchronised copy of a failover slot, confirmed where
// the old primary's slot was). The server's WAL is the old primary's up to the switch point
// and its own after it. Kafka positions at or below the switch point are in this server's WAL:
// the stream replays from the slot and skips what Kafka holds, and it is logged. A position
// past the switch point is this server's own change when Kafka's latest checkpoint names this
// timeline (a life here published it and ended before it confirmed the slot); otherwise it came
// from WAL the old primary sent but the standby never received (no synchronized_standby_slots),
// and this server's own changes up to it would be skipped as published: that is refused
// (promotion.go). A slot confirmed past the switch point was confirmed on this server, by a
// life that made the same check. A server on none of the timelines Kafka's checkpoint allows
// is refused whatever its slot (checkOrigin).
func checkPromotion(cfg Config, slot replication.SlotInfo, tl replication.Timeline, cp *watermark.Checkpoint, resume map[change.ExportID]change.LSN, published map[change.ExportID]struct{}) error {
	if err := checkOrigin(cfg, tl, cp); err != nil {
		return err
	}
	if tl.ID <= 1 || !slot.Exists || slot.Confirmed >= tl.SwitchPoint {
		return nil
	}
	var ahead change.ExportID
	var kafka change.LSN
	for e, p := range resume {
		if _, ok := published[e]; ok && p > kafka {
			ahead, kafka = e, p
		}
	}
	if kafka > tl.SwitchPoint {
		return pastPromotion(cfg, tl, cp, slot.Confirmed, ahead, kafka)
	}
	if kafka > slot.Confirmed {
		cfg.Logger.Warn("failover: this server was promoted and its replication slot is behind what Kafka holds; the stream replays from the slot and skips what Kafka holds, nothing is copied again",
			"slot", cfg.Slot, "timeline", tl.ID, "promoted_at", tl.SwitchPoint.String(), "slot_lsn", slot.Confirmed.String(), "kafka_lsn", kafka.String(), "export", ahead.String())
	}
	return nil
}

// checkChunkedOnStandby refuses to go on with a chunked copy that an earlier life began when
// nothing can write its markers now.
func checkChunkedOnStandby(src replication.Source, tracker *watermark.Tracker, resume map[change.ExportID]change.LSN) error {
	if !src.Standby || src.Primary != nil {
		return nil
	}
	for e := range resume {
		if _, _, chunked := tracker.Chunked(e); chunked {
			return fatal(pgcat.SetupError(fmt.Errorf("export %s has a chunked copy in progress, which writes its markers on the primary, and CDC_PG_URL names a standby without CDC_PG_PRIMARY_URL: set CDC_PG_PRIMARY_URL, or point CDC_PG_URL at the primary, until the copy is done (%s)", e, replication.StandbyDoc)))
		}
	}
	return nil
}
