package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// wire connects the stages of one life with channels and runs them until ctx ends or one
// fails, then stops them in order:
//
//	replication ──units──┐                      ┌──acks──► owner ──records (reply)──┐
//	reconciler ──units───┼──► mergeUnits ──► sink                                  │
//	snapshot ────bulk────┘                      └◄─────────────────────────────────┘
//	chunker ──windows, chunks──► replication
//	poller, snapshot, chunker, reconciler, HTTP ──events──► owner ──commands──► stages
func wire(ctx context.Context, cfg Config, life *lifeRegistry, reg prometheus.Registerer, attempt int, pl *plan, stopAt *atomic.Int64) error {
	log, conn, sk, tracker, slot, codecCfg, markerTag := cfg.Logger, pl.conn, pl.sk, pl.tracker, pl.slot, pl.codec, pl.markerTag
	checkpoint, published, resume := pl.checkpoint, pl.published, pl.resume
	o := newOwner(cfg, tracker, log.With("stage", "pipeline"))
	o.startLSN = slot.Confirmed
	o.origin = originOf(pl.timeline)
	o.topics = sk
	pgConnect := func(ctx context.Context) (*pgcat.Conn, error) { return connect(ctx, cfg.PGURL, cfg.timeouts()) }
	replCfg := cfg.Replication
	replCfg.ConnString, replCfg.Slot, replCfg.Publication = cfg.PGURL, cfg.Slot, cfg.Publication
	replCfg.SessionParams, replCfg.MarkerTag, replCfg.Timeouts = pgcat.SessionParams(), markerTag, cfg.timeouts()
	replCfg.StalePID, replCfg.Codec, replCfg.Logger = life.walsender.Load(), codecCfg, log
	repl := replication.New(replCfg, &keyColumns{connect: pgConnect})
	defer func() { life.walsender.Store(repl.BackendPID()) }()
	snapCfg := cfg.Snapshot
	snapCfg.Publication, snapCfg.ConnString, snapCfg.SlotPrefix = cfg.Publication, cfg.PGURL, cfg.Slot
	snapCfg.Codec, snapCfg.BatchBytes, snapCfg.Limiter = codecCfg, snapshotBatchBytes, snapshot.NewLimiter(cfg.SnapshotMaxRowsPerSecond)
	snapCfg.Timeouts, snapCfg.Logger, snapCfg.Registerer = cfg.timeouts(), log, reg
	if pl.src.standby {
		// Copies read on the standby; what they must write goes to the primary.
		snapCfg.Standby = true
		if pl.src.primary != nil {
			snapCfg.PrimaryConnString = cfg.PrimaryURL
		}
	}
	// The chunker's windows and chunks go to the replication stage directly; its failures and
	// the snapshot stage's reports go to the owner as events.
	chunker, err := snapshot.NewChunker(snapCfg, markerTag, chunkWiring{repl: repl, snapshotEvents: snapshotEvents{o}})
	if err != nil {
		return fatal(err)
	}
	snap, err := snapshot.New(snapCfg, snapshotEvents{o})
	if err != nil {
		return fatal(err)
	}
	o.repl, o.chunks, o.facts = repl, chunker, repl.Facts()
	if checkpoint != nil && checkpoint.Partial != nil {
		// A transaction published in pieces was cut short: its durable changes are skipped
		// when the server sends it again, and watermarks wait for the rest.
		p := *checkpoint.Partial
		o.partial = &p
		repl.ResumePartial(p)
		log.Info("resuming a transaction published in part", "commit_lsn", p.Commit.String(), "changes_published", p.Changes)
	}
	poll := newPoller(cfg, pgConnect, o, log)
	poll.toast = &life.toast
	recon := &reconciler{cfg: cfg, log: log.With("stage", "pipeline"), connect: pgConnect, codec: codecCfg, sink: sk, owner: o}
	// Exports restored from the watermark topic go on; their topics must exist.
	if err := o.resume(ctx, connCatalog{conn: conn, pub: cfg.Publication}, published, slot.Confirmed); err != nil {
		return err
	}

	// Stream units (replication, reconciles) and bulk units (snapshot rows) reach the sink
	// through mergeUnits, stream first. The sink reports what Kafka holds to the owner (acks).
	units := make(chan *change.Unit, unitBuffer)
	bulk := make(chan *change.Unit, bulkBuffer)
	merged := make(chan *change.Unit, 2)
	sinkCtx, sinkCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer sinkCancel()
	go mergeUnits(sinkCtx, units, bulk, merged)
	sinkErr := make(chan error, 1)
	sinkDone := make(chan struct{})
	go func() {
		defer close(sinkDone)
		sinkErr <- sk.Run(sinkCtx, merged, o.acks)
	}()

	g, gctx := errgroup.WithContext(ctx)
	sinkStopped := false
	g.Go(func() error {
		select {
		case err := <-sinkErr:
			sinkStopped = true
			if err == nil {
				err = errors.New("sink stopped")
			}
			return err
		case <-gctx.Done():
			return nil
		}
	})
	g.Go(func() error { return o.run(gctx) })
	g.Go(func() error { return repl.Run(gctx, units) })
	g.Go(func() error { return snap.Run(gctx, o.requests, bulk) })
	g.Go(func() error { return poll.run(gctx) })
	g.Go(func() error { return recon.run(gctx, o.reconciles, units) })
	g.Go(func() error { return chunker.Run(gctx) })
	life.owner.Store(&running{owner: o, streaming: repl.Streaming, kafkaWaiting: sk.Waiting})
	defer life.owner.Store(nil)
	life.ran.Store(true)
	log.Info("pipeline running", "attempt", attempt, "exports", len(published), "resumed", len(resume),
		"watermark_mode", string(tracker.Mode()), "delivery", string(sk.Delivery()), "snapshot_strategy", string(cfg.SnapshotStrategy.OrDefault()))
	err = g.Wait()

	// Orderly stop: the stages have stopped sending; let the sink drain what it has, then
	// confirm what Kafka holds, within ShutdownTimeout of the stop's start.
	begin := time.Now()
	if at := stopAt.Load(); at != 0 {
		begin = time.Unix(0, at)
	}
	drainBy, confirmBy := stopBudget(begin, cfg.ShutdownTimeout)
	// The owner's loop has ended: it answers the sink alone while the sink drains.
	stopDrain, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		o.drain(sinkDone, stopDrain)
	}()
	if !sinkStopped {
		close(units)
		close(bulk)
		drain := time.NewTimer(time.Until(drainBy))
		select {
		case serr := <-sinkErr:
			if serr != nil && err == nil {
				err = serr
			}
		case <-drain.C:
			log.Warn("kafka did not take the last changes within the shutdown budget; they are sent again at the next start",
				"shutdown_timeout", cfg.ShutdownTimeout.String())
			sinkCancel()
			// The sink aborts its open transaction. Waiting for a Kafka that does not answer
			// would spend the budget of the confirmation: the broker aborts the transaction at
			// its timeout anyway, and the next instance fences it. Closing the client ends
			// the abort.
			select {
			case <-sinkErr:
			case <-time.After(time.Second):
				defer func() {
					sk.Close()
					<-sinkErr
				}()
			}
		}
		drain.Stop()
	}
	close(stopDrain)
	<-drained
	// Not on a promoted server (another timeline): what Kafka holds is checked against its
	// WAL at the next start-up (checkPromotion), and confirming could skip its own changes.
	if lsn, ok := o.confirmable(); ok && !errors.Is(err, replication.ErrServerChanged) {
		fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), confirmBy)
		same := true
		if conn.IsClosed() { // the server restarted under it, or another one took over
			if c, err := connect(fctx, cfg.PGURL, cfg.timeouts()); err == nil {
				defer c.Close(context.Background())
				conn = c
			}
			tl, err := replication.ReadTimeline(fctx, cfg.PGURL, cfg.timeouts())
			same = err == nil && tl.ID == pl.timeline.ID
		}
		if same {
			confirmFinal(fctx, conn, cfg.Slot, lsn, log)
		}
		cancel()
	}
	if ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, sink.ErrFenced) {
		if h, held := otherHolder(ctx, cfg, repl.BackendPID()); held {
			return fatal(fmt.Errorf("%w; this instance stops: another instance took over slot %q (%s)", err, cfg.Slot, h))
		}
	}
	return err
}

// DefaultShutdownTimeout is Config.ShutdownTimeout's default: within Kubernetes' default grace
// period of 30 s, with room to spare.
const DefaultShutdownTimeout = 20 * time.Second

// stopBudget splits an orderly stop that began at begin and must end within timeout: the sink
// drains until drainBy, the slot is confirmed until confirmBy, and the rest (a tenth, at most
// a second) is left for closing the connections.
func stopBudget(begin time.Time, timeout time.Duration) (drainBy, confirmBy time.Time) {
	confirmBy = begin.Add(timeout - min(time.Second, timeout/10))
	drainBy = confirmBy.Add(-min(5*time.Second, timeout/4))
	return drainBy, confirmBy
}

// confirmFinal advances the slot to lsn once the replication connection has let go of it. A
// slot that does not exist (dropped, or the server is a promoted standby without it) has
// nothing to confirm: waiting for it would hold the stop for the whole shutdown budget.
func confirmFinal(ctx context.Context, conn *pgcat.Conn, slot string, lsn change.LSN, log *slog.Logger) {
	for {
		s, err := replication.ReadSlot(ctx, conn, slot)
		if err == nil && !s.Exists {
			return
		}
		if err != nil && conn.IsClosed() {
			log.Warn("confirm final position: the connection is gone; the next start resumes from the slot", "slot", slot, "lsn", lsn.String(), "err", err)
			return
		}
		if err == nil && !s.Active {
			if lsn > s.Confirmed {
				if err := replication.AdvanceSlot(ctx, conn, slot, lsn); err != nil {
					log.Warn("confirm final position", "slot", slot, "lsn", lsn.String(), "err", err)
				} else {
					log.Info("confirmed final position", "slot", slot, "lsn", lsn.String())
				}
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
