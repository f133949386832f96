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
	if pl.src.standby && pl.src.primary == nil && cfg.SnapshotStrategy.OrDefault() == snapshot.StrategyChunked {
		// The chunked strategy writes its markers into the WAL; a standby cannot.
		cfg.Logger.Info("tables are copied with the copy strategy: CDC_PG_URL names a standby, and the chunked strategy writes its markers on the primary (CDC_PG_PRIMARY_URL is not set)",
			"stage", "pipeline", "doc", standbyDoc)
		cfg.SnapshotStrategy = snapshot.StrategyCopy
	}
	return wire(ctx, cfg, life, reg, attempt, pl, &stopAt)
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
	src        source
	timeline   replication.Timeline
	resume     map[change.ExportID]change.LSN
	codec      codec.Config
	markerTag  string
	// types loads type descriptions for the codec's catalog, on a connection of its own.
	types *typeLoader
}

func (pl *plan) close() {
	pl.src.close()
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
// watermark topic and makes sure the slot exists and lost nothing.
func startUp(ctx context.Context, cfg Config, life *lifeRegistry, reg prometheus.Registerer, attempt int) (_ *plan, err error) {
	log := cfg.Logger
	pl := &plan{}
	defer func() {
		if err != nil {
			pl.close()
		}
	}()
	pl.types = newTypeLoader(cfg.PGURL, cfg.timeouts())
	conn, err := connect(ctx, cfg.PGURL, cfg.timeouts())
	if err != nil {
		return nil, err
	}
	pl.conn = conn
	if err := replication.CheckServer(ctx, conn); err != nil {
		return nil, err
	}
	if cfg.SlotFailover {
		if err := replication.CheckFailover(conn); err != nil {
			return nil, err
		}
	}
	if pl.src, err = checkSource(ctx, cfg, conn, log.With("stage", "pipeline")); err != nil {
		return nil, err
	}
	var database string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&database); err != nil {
		return nil, fmt.Errorf("read database name: %w", err)
	}

	skCfg := cfg.Sink
	skCfg.TransactionalID = TransactionalID(database, cfg.Slot)
	skCfg.DialTimeout, skCfg.MaxBatchBytes, skCfg.MaxBulkBatchBytes = cfg.ConnectTimeout, sinkBatchBytes, sinkBulkBatchBytes
	// Process-wide: the sink's counters survive the restart that its errors cause.
	skCfg.Logger, skCfg.Registerer = log, life.base
	sk, err := sink.New(skCfg)
	if err != nil {
		return nil, fatal(err)
	}
	pl.sk = sk
	if err := sk.Ping(ctx); err != nil {
		return nil, err
	}
	// Everything PostgreSQL must say yes to, before anything is created in Kafka.
	if err := ensurePublication(ctx, cfg, conn, pl.src); err != nil {
		return nil, err
	}
	published, err := pgcat.PublishedTables(ctx, conn, cfg.Publication)
	if err != nil {
		return nil, err
	}
	exports := make([]change.ExportID, 0, len(published))
	for e := range published {
		exports = append(exports, e)
	}
	if err := change.CheckTopicCollisions(cfg.TopicPrefix, exports); err != nil {
		return nil, fatal(err)
	}

	// A walsender of this process's previous life that still holds the slot lost its path
	// without a close: end it, or this instance would wait for itself as a standby.
	if err := replication.ReleaseStale(ctx, conn.PgConn(), cfg.Slot, life.walsender.Load(), log.With("stage", "pipeline")); err != nil {
		return nil, err
	}
	// One instance per slot: wait while another one streams from it, before the producer is
	// initialised (that would fence the running instance's transactions).
	if err := replication.WaitAsStandby(ctx, conn, cfg.Slot, cfg.StandbyPoll, log.With("stage", "pipeline")); err != nil {
		return nil, err
	}
	if err := sk.Init(ctx); err != nil {
		return nil, err
	}
	if err := sk.EnsureTopics(ctx, []sink.TopicSpec{{Name: cfg.Sink.WatermarkTopic, Compact: true}}); err != nil {
		return nil, err
	}
	timeline, err := replication.ReadTimeline(ctx, cfg.PGURL, cfg.timeouts())
	if err != nil {
		return nil, err
	}
	tracker := watermark.NewTracker(cfg.Watermark)
	// Folded as it is read: only each export's latest record is kept, whatever the topic's age.
	// Every value is checked against the end of the server's WAL (restorecheck.go).
	wmRead := watermark.NewTopicReader()
	var primary pgcat.Querier
	if pl.src.primary != nil {
		primary = pl.src.primary
	}
	guard := newRestoreGuard(conn, primary)
	if err := guard.start(ctx, wmRead); err != nil {
		return nil, err
	}
	if err := sk.ReadWatermarks(ctx, guard.add(ctx, wmRead)); err != nil {
		if guard.err != nil {
			return nil, guard.err
		}
		var bad *sink.RecordError
		if errors.As(err, &bad) {
			if past, ok := errors.AsType[*pastWALError](err); ok {
				return nil, refuseRestore(cfg, bad, past, timeline)
			}
			// A record this build cannot read (too large, not a watermark record, a newer
			// version): retrying reads the same record again.
			return nil, fatal(fmt.Errorf("watermark topic: %w", err))
		}
		return nil, fmt.Errorf("read watermark topic %s: %w", cfg.Sink.WatermarkTopic, err)
	}
	recs, checkpoint := wmRead.Result()
	tracker.Restore(recs)
	if checkpoint != nil {
		tracker.RestoreCheckpoint(checkpoint.Position)
	}

	resume := tracker.Resume()
	if err := checkChunkedOnStandby(pl.src, tracker, resume); err != nil {
		return nil, err
	}
	slot, err := replication.ReadSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return nil, err
	}
	if err := checkSlot(cfg, slot, timeline, resume, published); err != nil {
		return nil, err
	}
	if err := checkPromotion(cfg, slot, timeline, checkpoint, resume, published); err != nil {
		return nil, err
	}
	if !slot.Exists {
		if err := createSlot(ctx, cfg, pl.src, log.With("stage", "pipeline")); err != nil {
			return nil, err
		}
		if slot, err = replication.ReadSlot(ctx, conn, cfg.Slot); err != nil {
			return nil, err
		}
		log.Info("created replication slot", "slot", cfg.Slot, "lsn", slot.Confirmed.String(), "failover", cfg.SlotFailover)
	} else if cfg.SlotFailover {
		failover, err := replication.ReadFailover(ctx, conn, cfg.Slot)
		if err != nil {
			return nil, err
		}
		if !failover {
			if err := replication.SetFailover(ctx, cfg.PGURL, cfg.Slot, cfg.timeouts()); err != nil {
				return nil, err
			}
			log.Info("made the replication slot a failover slot", "slot", cfg.Slot)
		}
	}

	// The WAL markers of this life's chunked copies: earlier lives and other instances write
	// their own.
	markerTag := fmt.Sprintf("%s/%d/%d/%d", cfg.Slot, os.Getpid(), attempt, time.Now().UnixNano())
	codecCfg := codec.Config{Database: database, TopicPrefix: cfg.TopicPrefix, Tombstones: true,
		// Room for the key and headers within what Kafka accepts.
		MaxRecordBytes: sink.MaxRecordBytes - 64<<10,
		Format:         cfg.ValueFormat,
		// One catalog for every stage, so the snapshot and the stream build identical encoders.
		Types:       codec.NewTypes(pl.types.load),
		Unchanged:   cfg.UnchangedToast,
		Placeholder: cfg.UnchangedPlaceholder,
	}
	pl.published, pl.tracker, pl.checkpoint, pl.slot, pl.resume = published, tracker, checkpoint, slot, resume
	pl.timeline = timeline
	pl.codec, pl.markerTag = codecCfg, markerTag
	return pl, nil
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
