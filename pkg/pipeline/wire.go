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

// stages are one life's stages and the channels between them, built from the start-up plan in
// one step (build), then run until ctx ends or one fails (run), then stopped in order within
// ShutdownTimeout (stop):
//
//	replication ──units──┐                      ┌──acks──► owner ──records (reply)──┐
//	reconciler ──units───┼──► mergeUnits ──► sink                                  │
//	snapshot ────bulk────┘                      └◄─────────────────────────────────┘
//	chunker ──windows, chunks──► replication
//	poller, snapshot, chunker, reconciler, HTTP ──events──► owner ──commands──► stages
//
// The stages hold the owner's inbox, made first; the owner, made last, is given the stages.
type stages struct {
	cfg     Config
	pl      *plan
	life    *lifeRegistry
	attempt int

	in      *inbox
	o       *owner
	sink    kafkaSink
	repl    *replication.Stage
	snap    *snapshot.Stage
	chunker *snapshot.Chunker
	poll    *poller
	recon   *snapshot.Reconciler
	// Stream units (replication, reconciles) and bulk units (snapshot rows) reach the sink
	// through mergeUnits (merged), stream first.
	units, bulk, merged chan *change.Unit
}

// build makes every stage and channel of a life from the start-up plan pl.
func build(cfg Config, life *lifeRegistry, reg prometheus.Registerer, attempt int, pl *plan) (*stages, error) {
	s := &stages{cfg: cfg, pl: pl, life: life, attempt: attempt, in: newInbox(), sink: pl.sk,
		units: make(chan *change.Unit, unitBuffer), bulk: make(chan *change.Unit, bulkBuffer), merged: make(chan *change.Unit, 2)}
	log := cfg.Logger
	pgConnect := func(ctx context.Context) (*pgcat.Conn, error) { return connect(ctx, cfg.PGURL, cfg.timeouts()) }
	s.repl = replication.New(s.replicationConfig(), &keyColumns{connect: pgConnect})
	snapCfg := s.snapshotConfig(reg)
	// The chunker's windows and chunks go to the replication stage directly; its failures and
	// the snapshot stage's reports go to the owner as events.
	var err error
	if s.chunker, err = snapshot.NewChunker(snapCfg, pl.markerTag, chunkWiring{repl: s.repl, snapshotEvents: snapshotEvents{s.in}}); err != nil {
		return nil, fatal(err)
	}
	if s.snap, err = snapshot.New(snapCfg, snapshotEvents{s.in}); err != nil {
		return nil, fatal(err)
	}
	s.poll = newPoller(cfg, pgConnect, s.in, log)
	s.poll.toast = &life.toast
	s.recon = &snapshot.Reconciler{Publication: cfg.Publication, Connect: pgConnect, Codec: pl.codec, Keys: s.sink,
		Hooks: snapshotEvents{s.in}, Logger: log.With("stage", "pipeline")}
	s.o = newOwner(cfg, pl.tracker, log.With("stage", "pipeline"), s.in,
		targets{repl: s.repl, chunks: s.chunker, topics: s.sink, facts: s.repl.Facts()})
	s.o.startLSN = pl.slot.Confirmed
	s.o.origin = originOf(pl.timeline)
	if cp := pl.checkpoint; cp != nil && cp.Partial != nil {
		// A transaction published in pieces was cut short: its durable changes are skipped
		// when the server sends it again, and watermarks wait for the rest.
		p := *cp.Partial
		s.o.partial = &p
		s.repl.ResumePartial(p)
		log.Info("resuming a transaction published in part", "commit_lsn", p.Commit.String(), "changes_published", p.Changes)
	}
	return s, nil
}

func (s *stages) replicationConfig() replication.Config {
	c := s.cfg.Replication
	c.ConnString, c.Slot, c.Publication = s.cfg.PGURL, s.cfg.Slot, s.cfg.Publication
	c.SessionParams, c.MarkerTag, c.Timeouts = pgcat.SessionParams(), s.pl.markerTag, s.cfg.timeouts()
	c.StalePID, c.Codec, c.Logger = s.life.walsender.Load(), s.pl.codec, s.cfg.Logger
	return c
}

func (s *stages) snapshotConfig(reg prometheus.Registerer) snapshot.Config {
	c := s.cfg.Snapshot
	c.Publication, c.ConnString, c.SlotPrefix = s.cfg.Publication, s.cfg.PGURL, s.cfg.Slot
	c.Codec, c.BatchBytes, c.Limiter = s.pl.codec, snapshotBatchBytes, snapshot.NewLimiter(s.cfg.SnapshotMaxRowsPerSecond)
	c.Timeouts, c.Logger, c.Registerer = s.cfg.timeouts(), s.cfg.Logger, reg
	if s.pl.src.Standby {
		// Copies read on the standby; what they must write goes to the primary.
		c.Standby = true
		if s.pl.src.Primary != nil {
			c.PrimaryConnString = s.cfg.PrimaryURL
		}
	}
	return c
}

// run resumes the exports restored from the watermark topic, runs the stages until ctx ends or
// one fails, and stops them (stop).
func (s *stages) run(ctx context.Context, stopAt *atomic.Int64) error {
	defer func() { s.life.walsender.Store(s.repl.BackendPID()) }()
	pl, log := s.pl, s.cfg.Logger
	// Exports restored from the watermark topic go on; their topics must exist.
	if err := s.o.resume(ctx, connCatalog{conn: pl.conn, pub: s.cfg.Publication}, pl.published, pl.slot.Confirmed); err != nil {
		return err
	}
	sinkCtx, sinkCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer sinkCancel()
	go mergeUnits(sinkCtx, s.units, s.bulk, s.merged)
	sk := &sinkRun{err: make(chan error, 1), done: make(chan struct{}), cancel: sinkCancel}
	go func() {
		defer close(sk.done)
		sk.err <- s.sink.Run(sinkCtx, s.merged, ackPort{s.in})
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		select {
		case err := <-sk.err:
			sk.stopped = true
			if err == nil {
				err = errors.New("sink stopped")
			}
			return err
		case <-gctx.Done():
			return nil
		}
	})
	g.Go(func() error { return s.o.run(gctx) })
	g.Go(func() error { return s.repl.Run(gctx, s.units) })
	g.Go(func() error { return s.snap.Run(gctx, s.in.requests, s.bulk) })
	g.Go(func() error { return s.poll.run(gctx) })
	g.Go(func() error {
		err := s.recon.Run(gctx, s.in.reconciles, s.units)
		if _, ok := errors.AsType[*sink.RecordError](err); ok {
			// A record the sink never writes: reading it again cannot help.
			return fatal(err)
		}
		return err
	})
	g.Go(func() error { return s.chunker.Run(gctx) })
	go watchKafka(gctx, s.sink.Waiting, log.With("stage", "sink"))
	s.life.owner.Store(&running{owner: s.o, streaming: s.repl.Streaming, kafkaWaiting: s.sink.Waiting})
	defer s.life.owner.Store(nil)
	s.life.ran.Store(true)
	log.Info("pipeline running", "attempt", s.attempt, "exports", len(pl.published), "resumed", len(pl.resume),
		"watermark_mode", string(pl.tracker.Mode()), "delivery", string(s.sink.Delivery()), "snapshot_strategy", string(s.cfg.SnapshotStrategy.OrDefault()))
	return s.stop(ctx, g.Wait(), sk, stopAt)
}

// kafkaSink is what a life's stages need of Kafka once start-up is done: the sink's loop, the
// topics the owner has made, the reconciler's scan of a topic's keys, and how long a batch has
// waited. Start-up's plan holds the *sink.Sink (it initialises it and reads the watermark
// topic); the stages hold only this.
type kafkaSink interface {
	topicControl
	snapshot.KeyScanner
	Run(ctx context.Context, in <-chan *change.Unit, acks sink.Acker) error
	Waiting() time.Duration
	Delivery() sink.Delivery
	Close()
}

var _ kafkaSink = (*sink.Sink)(nil)

// sinkRun is the sink's goroutine: its outcome, its end, and whether it stopped first.
type sinkRun struct {
	err     chan error
	done    chan struct{}
	cancel  context.CancelFunc
	stopped bool
	// abandoned: its abort did not end within a second of the drain's end; the client is
	// closed, and the goroutine waited for, after the slot is confirmed.
	abandoned bool
}

// stop is the orderly stop after the stages ended with err: the stages have stopped sending;
// the sink drains what it has, then the slot is confirmed where Kafka holds, within
// ShutdownTimeout of the stop's start.
func (s *stages) stop(ctx context.Context, err error, sk *sinkRun, stopAt *atomic.Int64) error {
	begin := time.Now()
	if at := stopAt.Load(); at != 0 {
		begin = time.Unix(0, at)
	}
	drainBy, confirmBy := stopBudget(begin, s.cfg.ShutdownTimeout)
	// The owner's loop has ended: it answers the sink alone while the sink drains.
	stopDrain, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		s.o.drain(sk.done, stopDrain)
	}()
	if !sk.stopped {
		if serr := s.drainSink(sk, drainBy); serr != nil && err == nil {
			err = serr
		}
	}
	close(stopDrain)
	<-drained
	// Not on a promoted server (another timeline): what Kafka holds is checked against its
	// WAL at the next start-up (checkPromotion), and confirming could skip its own changes.
	if lsn, ok := s.o.confirmable(); ok && !errors.Is(err, replication.ErrServerChanged) {
		fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), confirmBy)
		s.confirmAtStop(fctx, lsn)
		cancel()
	}
	if sk.abandoned {
		s.sink.Close()
		<-sk.err
	}
	if ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, sink.ErrFenced) {
		if h, held := replication.OtherHolder(ctx, s.cfg.PGURL, s.cfg.Slot, s.repl.BackendPID(), s.cfg.timeouts()); held {
			return fatal(fmt.Errorf("%w; this instance stops: another instance took over slot %q (%s)", err, s.cfg.Slot, h))
		}
	}
	return err
}

// drainSink closes the stages' channels and lets the sink write what it holds until drainBy.
func (s *stages) drainSink(sk *sinkRun, drainBy time.Time) error {
	close(s.units)
	close(s.bulk)
	drain := time.NewTimer(time.Until(drainBy))
	defer drain.Stop()
	select {
	case err := <-sk.err:
		return err
	case <-drain.C:
	}
	s.cfg.Logger.Warn("kafka did not take the last changes within the shutdown budget; they are sent again at the next start",
		"shutdown_timeout", s.cfg.ShutdownTimeout.String())
	sk.cancel()
	// The sink aborts its open transaction. Waiting for a Kafka that does not answer would
	// spend the budget of the confirmation: the broker aborts the transaction at its timeout
	// anyway, and the next instance fences it. Closing the client ends the abort.
	select {
	case <-sk.err:
	case <-time.After(time.Second):
		sk.abandoned = true // closed once the slot is confirmed (stop)
	}
	return nil
}

// confirmAtStop confirms the slot at lsn, on start-up's connection (a new one when the server
// restarted under it), unless the server is not the one this life read (another timeline).
func (s *stages) confirmAtStop(ctx context.Context, lsn change.LSN) {
	conn := s.pl.conn
	if conn.IsClosed() { // the server restarted under it, or another one took over
		if c, err := connect(ctx, s.cfg.PGURL, s.cfg.timeouts()); err == nil {
			defer c.Close(context.Background())
			conn = c
		}
		tl, err := replication.ReadTimeline(ctx, s.cfg.PGURL, s.cfg.timeouts())
		if err != nil || tl.ID != s.pl.timeline.ID {
			return
		}
	}
	confirmFinal(ctx, conn, s.cfg.Slot, lsn, s.cfg.Logger)
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

// watchKafka logs, once per stall, when the sink's batch has waited for Kafka longer than
// kafkaStall (franz-go retries an unanswered broker quietly: without this line a silent broker
// shows only on /readyz), and again when Kafka takes batches again. It ends with ctx.
func watchKafka(ctx context.Context, waiting func() time.Duration, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var stalled time.Duration // the wait when the stall was logged; 0: none logged
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d := waiting()
		switch {
		case stalled == 0 && d > kafkaStall:
			stalled = d
			log.Warn("kafka has not taken a batch for "+d.Round(time.Second).String()+": brokers unreachable or silent, or fewer in-sync replicas than min.insync.replicas; cdc waits and loses nothing",
				"waiting", d.Round(time.Second).String())
		case stalled != 0 && d < stalled:
			log.Info("kafka takes batches again", "stalled_for_at_least", stalled.Round(time.Second).String())
			stalled = 0
		case stalled != 0:
			stalled = d
		}
	}
}
