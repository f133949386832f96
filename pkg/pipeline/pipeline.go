package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/liveness"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// Bounds of the channels between the stages and the sink: stream units are mostly small
// transactions; bulk units are snapshot batches of at most snapshotBatchBytes.
const (
	unitBuffer         = 4096
	bulkBuffer         = 16
	snapshotBatchBytes = 256 << 10
	// sinkBulkBatchBytes bounds a Kafka transaction that holds snapshot rows: small enough that
	// a stream unit arriving behind a batch of them waits a fraction of a second, large enough
	// to amortise the commit.
	sinkBulkBatchBytes = 4 << 20
	// sinkBatchBytes bounds a transaction of stream units alone: while catching up, fewer and
	// larger transactions (the sink's linger still closes a batch after 100ms).
	sinkBatchBytes = 16 << 20
)

// Pipeline is Tidemark's pipeline: New, then Run. Metrics and Resnapshot may be used from any
// goroutine, before, during and after Run.
type Pipeline struct {
	cfg  Config
	life *lifeRegistry
}

// New returns a pipeline for cfg; nothing is connected until Run.
func New(cfg Config) *Pipeline {
	life := &lifeRegistry{base: prometheus.NewRegistry()}
	life.base.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Pipeline{cfg: cfg.withDefaults(), life: life}
}

// Metrics gathers the process's metrics and those of the pipeline's current life.
func (p *Pipeline) Metrics() prometheus.Gatherer { return p.life }

// Errors of Resnapshot.
var (
	// ErrNotRunning: the pipeline is (re)starting; ask again in a moment.
	ErrNotRunning = errors.New("the pipeline is not running")
	// ErrUnknownExport: the table is not exported.
	ErrUnknownExport = errUnknownExport
	// ErrNotHydrated: the table is being copied, or stopped.
	ErrNotHydrated = errNotHydrated
)

// Resnapshot copies one hydrated export again while the pipeline runs (a consumer lost its
// state). It returns at once; the copy shows in the export's watermark records.
func (p *Pipeline) Resnapshot(e change.ExportID) error {
	r := p.life.owner.Load()
	if r == nil {
		return ErrNotRunning
	}
	reply := make(chan error, 1)
	err, qerr := query(context.Background(), r.owner, evResnapshot{e: e, reply: reply}, reply)
	if qerr != nil {
		return ErrNotRunning
	}
	return err
}

// running is a life of the pipeline while its stages run.
type running struct {
	owner *owner
	// streaming reports whether the replication stage streams now.
	streaming func() bool
}

// states asks the owner for every export's state (nil once it stopped).
func (r *running) states() []ExportState {
	reply := make(chan []ExportState, 1)
	out, _ := query(context.Background(), r.owner, evStates{reply: reply}, reply)
	return out
}

// Exports returns each export's state now (nil while the pipeline is not running).
func (p *Pipeline) Exports() []ExportState {
	r := p.life.owner.Load()
	if r == nil {
		return nil
	}
	return r.states()
}

// Ready reports whether the pipeline is streaming and every live export is hydrated or being
// copied without error. reasons say what is not, apart from the failed exports, which come in
// failed: their error texts can quote row values, so the caller decides how much to show.
func (p *Pipeline) Ready() (ready bool, reasons []string, failed []ExportState) {
	r := p.life.owner.Load()
	if r == nil {
		return false, []string{"the pipeline is starting or restarting"}, nil
	}
	if !r.streaming() {
		reasons = append(reasons, "the replication stage is not streaming (connecting, or waiting for the slot)")
	}
	for _, s := range r.states() {
		if s.State == watermark.StateFailed {
			failed = append(failed, s)
		}
	}
	return len(reasons) == 0 && len(failed) == 0, reasons, failed
}

// Run runs the pipeline until ctx ends (then it stops in order and returns nil) or a fatal
// error occurs. Transient errors restart it with capped exponential backoff.
func (p *Pipeline) Run(ctx context.Context) error {
	cfg, reg := p.cfg, p.life
	log := cfg.Logger
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		started := time.Now()
		err := runOnce(ctx, cfg, reg, attempt)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("pipeline stopped unexpectedly")
		}
		// runOnce made a fence by another instance fatal; one without is a transaction the
		// broker aborted at its timeout, and a new life recovers.
		fencedAlone := errors.Is(err, sink.ErrFenced) && !errors.Is(err, ErrFatal)
		if fencedAlone {
			log.Warn("kafka transaction fenced, but no other instance holds the slot (a transaction aborted by its timeout); restarting", "err", err)
		}
		if exitNow(err, attempt, reg.ran.Load(), time.Since(started), cfg.startupWindow()) {
			return err
		}
		if time.Since(started) > 2*time.Minute {
			backoff = time.Second
		}
		log.Error("pipeline failed; restarting", "err", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// exitNow reports whether Run ends on err from attempt, which ran for elapsed (ran: whether
// its stages started). Fatal errors end Run, and so does a slot lost while running (changes
// may be gone: never continue silently). So does a failure within window of the start of the
// first attempt before its stages ran: an unreachable server at start-up (refused, or silent
// until the connect timeout) is a configuration problem to show at once. But not a connection
// that was open and then closed, reset or silent (a server restarting, a proxy cutting
// connections just as a new process started), and not a fence without another instance (a
// transaction the broker aborted at its timeout): a new life recovers from those, as it does
// when a running pipeline loses Kafka a second later.
func exitNow(err error, attempt int, ran bool, elapsed, window time.Duration) bool {
	if errors.Is(err, ErrFatal) || errors.Is(err, replication.ErrSetup) || errors.Is(err, replication.ErrSlotLost) {
		return true
	}
	fencedAlone := errors.Is(err, sink.ErrFenced)
	return attempt == 1 && !ran && elapsed < window && !fencedAlone && !connectionLost(err)
}

// startupWindow is how long the first attempt's failures count as start-up problems: a few
// seconds beyond the connect timeout, so that a server that never answers ends Run too.
func (cfg Config) startupWindow() time.Duration { return cfg.ConnectTimeout + 5*time.Second }

// timeouts are the bounds of every PostgreSQL connection.
func (cfg Config) timeouts() liveness.Timeouts {
	return liveness.Timeouts{Connect: cfg.ConnectTimeout, Receive: cfg.ReceiveTimeout}
}

func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Slot == "" {
		cfg.Slot = "tidemark"
	}
	if cfg.Publication == "" {
		cfg.Publication = "tidemark"
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = "tidemark"
	}
	if cfg.WatermarkTopic == "" {
		cfg.WatermarkTopic = cfg.TopicPrefix + ".__watermarks"
	}
	if cfg.TopicPartitions <= 0 {
		cfg.TopicPartitions = 1
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = 1
	}
	if cfg.Delivery == "" {
		cfg.Delivery = ExactlyOnce
	}
	if cfg.WatermarkMode == "" {
		cfg.WatermarkMode = Independent
	}
	if cfg.WatermarkInterval <= 0 {
		cfg.WatermarkInterval = time.Second
	}
	if cfg.PublicationPollInterval <= 0 {
		cfg.PublicationPollInterval = 5 * time.Second
	}
	if cfg.SnapshotWorkers <= 0 {
		cfg.SnapshotWorkers = 4
	}
	if cfg.SnapshotStrategy == "" {
		cfg.SnapshotStrategy = StrategyChunked
	}
	if cfg.StandbyPoll <= 0 {
		cfg.StandbyPoll = time.Second
	}
	if cfg.SlotWaitTimeout <= 0 {
		cfg.SlotWaitTimeout = 5 * time.Minute
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = liveness.DefaultConnect
	}
	if cfg.ReceiveTimeout <= 0 {
		cfg.ReceiveTimeout = liveness.DefaultReceive
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	return cfg
}

// runOnce is one life of the pipeline: checks, restore, stages, orderly stop.
func runOnce(ctx context.Context, cfg Config, life *lifeRegistry, attempt int) error {
	log := cfg.Logger
	reg := prometheus.NewRegistry()
	life.current.Store(reg)
	// When ctx ends, an orderly stop begins: its steps share ShutdownTimeout from then.
	var stopAt atomic.Int64
	defer context.AfterFunc(ctx, func() { stopAt.Store(time.Now().UnixNano()) })()

	conn, err := connect(ctx, cfg.PGURL, cfg.timeouts())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := replication.CheckServer(ctx, conn); err != nil {
		return err
	}
	var database string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&database); err != nil {
		return fmt.Errorf("read database name: %w", err)
	}

	sk, err := sink.New(sink.Config{
		Brokers:            cfg.Brokers,
		Security:           cfg.KafkaSecurity,
		Delivery:           sink.Delivery(cfg.Delivery),
		TransactionalID:    "tidemark-" + database + "-" + cfg.Slot,
		TransactionTimeout: cfg.TransactionTimeout,
		Compression:        cfg.KafkaCompression,
		Partitions:         cfg.TopicPartitions,
		ReplicationFactor:  cfg.ReplicationFactor,
		WatermarkTopic:     cfg.WatermarkTopic,
		DialTimeout:        cfg.ConnectTimeout,
		MaxBatchBytes:      sinkBatchBytes,
		MaxBulkBatchBytes:  sinkBulkBatchBytes,
		Logger:             log,
		Registerer:         reg,
	})
	if err != nil {
		return fatal(err)
	}
	defer sk.Close()
	if err := sk.Ping(ctx); err != nil {
		return err
	}
	// Everything PostgreSQL must say yes to, before anything is created in Kafka.
	if err := replication.EnsurePublication(ctx, conn, cfg.Publication, cfg.Tables); err != nil {
		return err
	}
	published, err := replication.PublishedTables(ctx, conn, cfg.Publication)
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

	// A walsender of this process's previous life that still holds the slot lost its path
	// without a close: end it, or this instance would wait for itself as a standby.
	if err := replication.ReleaseStale(ctx, conn.PgConn(), cfg.Slot, life.walsender.Load(), log.With("stage", "pipeline")); err != nil {
		return err
	}
	// One instance per slot: wait while another one streams from it, before the producer is
	// initialised (that would fence the running instance's transactions).
	if err := replication.WaitAsStandby(ctx, conn, cfg.Slot, cfg.StandbyPoll, log.With("stage", "pipeline")); err != nil {
		return err
	}
	if err := sk.Init(ctx); err != nil {
		return err
	}
	if err := sk.EnsureTopics(ctx, []sink.TopicSpec{{Name: cfg.WatermarkTopic, Compact: true}}); err != nil {
		return err
	}
	tracker := watermark.NewTracker(watermark.Options{Mode: watermark.Mode(cfg.WatermarkMode), Interval: cfg.WatermarkInterval})
	// Folded as it is read: only each export's latest record is kept, whatever the topic's age.
	wmRead := watermark.NewTopicReader()
	if err := sk.ReadWatermarks(ctx, wmRead.Add); err != nil {
		var bad *sink.RecordError
		if errors.As(err, &bad) {
			// A record this build cannot read (too large, not a watermark record, a newer
			// version): retrying reads the same record again.
			return fatal(fmt.Errorf("watermark topic: %w", err))
		}
		return fmt.Errorf("read watermark topic %s: %w", cfg.WatermarkTopic, err)
	}
	recs, checkpoint := wmRead.Result()
	tracker.Restore(recs)
	if checkpoint != nil {
		tracker.RestoreCheckpoint(checkpoint.Position)
	}

	resume := tracker.Resume()
	slot, err := replication.ReadSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return err
	}
	if err := checkSlot(cfg, slot, resume, published); err != nil {
		return err
	}
	if !slot.Exists {
		if err := replication.CreateSlot(ctx, cfg.PGURL, cfg.Slot, cfg.timeouts()); err != nil {
			return err
		}
		if slot, err = replication.ReadSlot(ctx, conn, cfg.Slot); err != nil {
			return err
		}
		log.Info("created replication slot", "slot", cfg.Slot, "lsn", slot.Confirmed.String())
	}

	// The WAL markers of this life's chunked copies: earlier lives and other instances write
	// their own.
	markerTag := fmt.Sprintf("%s/%d/%d/%d", cfg.Slot, os.Getpid(), attempt, time.Now().UnixNano())
	codecCfg := codec.Config{Database: database, TopicPrefix: cfg.TopicPrefix, Tombstones: true,
		// Room for the key and headers within what Kafka accepts.
		MaxRecordBytes: sink.MaxRecordBytes - 64<<10,
		Format:         cfg.ValueFormat,
		// One catalog for every stage, so the snapshot and the stream build identical encoders.
		Types: codec.NewTypes(func(ctx context.Context, oids []uint32) ([]codec.TypeInfo, error) {
			conn, err := connect(ctx, cfg.PGURL, cfg.timeouts())
			if err != nil {
				return nil, err
			}
			defer conn.Close(context.Background())
			return codec.QueryTypes(ctx, conn, oids)
		}),
		Placeholder: cfg.UnchangedPlaceholder,
	}
	if cfg.UnchangedToast == UnchangedPlaceholder {
		codecCfg.Unchanged = codec.UnchangedPlaceholder
	}
	o := newOwner(cfg, tracker, log.With("stage", "pipeline"))
	o.startLSN = slot.Confirmed
	o.topics = sk
	pgConnect := func(ctx context.Context) (*pgx.Conn, error) { return connect(ctx, cfg.PGURL, cfg.timeouts()) }
	repl := replication.New(replication.Config{
		ConnString:    cfg.PGURL,
		Slot:          cfg.Slot,
		Publication:   cfg.Publication,
		SessionParams: snapshot.SessionParams(),
		HoldMemory:    cfg.HoldMemory,
		SpillDir:      cfg.SpillDir,
		MarkerTag:     markerTag,
		PieceBytes:    cfg.TxnPieceBytes,
		Timeouts:      cfg.timeouts(),
		StalePID:      life.walsender.Load(),
		Codec:         codecCfg,
		Logger:        log,
	}, &keyColumns{connect: pgConnect})
	defer func() { life.walsender.Store(repl.BackendPID()) }()
	snapCfg := snapshot.Config{
		Publication:     cfg.Publication,
		ConnString:      cfg.PGURL,
		Workers:         cfg.SnapshotWorkers,
		SlotPrefix:      cfg.Slot,
		Codec:           codecCfg,
		BatchBytes:      snapshotBatchBytes,
		SlotWaitTimeout: cfg.SlotWaitTimeout,
		Limiter:         snapshot.NewLimiter(cfg.SnapshotMaxRowsPerSecond),
		ChunkRows:       cfg.SnapshotChunkRows,
		Timeouts:        cfg.timeouts(),
		Logger:          log,
		Registerer:      reg,
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
	life.owner.Store(&running{owner: o, streaming: repl.Streaming})
	defer life.owner.Store(nil)
	life.ran.Store(true)
	log.Info("pipeline running", "attempt", attempt, "exports", len(published), "resumed", len(resume),
		"watermark_mode", string(cfg.WatermarkMode), "delivery", string(cfg.Delivery), "snapshot_strategy", string(cfg.SnapshotStrategy))
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
	if lsn, ok := o.confirmable(); ok {
		fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), confirmBy)
		if conn.IsClosed() { // the server restarted under it
			if c, err := connect(fctx, cfg.PGURL, cfg.timeouts()); err == nil {
				defer c.Close(context.Background())
				conn = c
			}
		}
		confirmFinal(fctx, conn, cfg.Slot, lsn, log)
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

// confirmFinal advances the slot to lsn once the replication connection has let go of it.
func confirmFinal(ctx context.Context, conn *pgx.Conn, slot string, lsn change.LSN, log *slog.Logger) {
	for {
		s, err := replication.ReadSlot(ctx, conn, slot)
		if err == nil && s.Exists && !s.Active {
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

// checkSlot fails loudly when changes were lost: a missing or invalidated slot while exports
// are hydrated, or a slot confirmed past a hydrated export's own position.
func checkSlot(cfg Config, slot replication.SlotInfo, resume map[change.ExportID]change.LSN, published map[change.ExportID]struct{}) error {
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
		return fatal(fmt.Errorf("replication slot %q is missing but %d exports were hydrated from it: changes since then are lost; to start over, delete the watermark topic %s (or use a new CDC_TOPIC_PREFIX) so every table is snapshotted again", cfg.Slot, live, cfg.WatermarkTopic))
	}
	if slot.WALStatus == "lost" {
		return fatal(fmt.Errorf("replication slot %q was invalidated (wal_status=lost, max_slot_wal_keep_size exceeded): changes are lost; drop the slot and delete the watermark topic %s to take a new snapshot", cfg.Slot, cfg.WatermarkTopic))
	}
	for e, p := range resume {
		if _, ok := published[e]; ok && slot.Confirmed > p {
			return fatal(fmt.Errorf("replication slot %q is confirmed at %s, past export %s's own position %s: changes in between are lost; delete the watermark topic %s to take a new snapshot", cfg.Slot, slot.Confirmed, e, p, cfg.WatermarkTopic))
		}
	}
	return nil
}

// lifeRegistry lets the metrics endpoint serve the registry of the current life of the
// pipeline beside the process-wide one.
type lifeRegistry struct {
	base    *prometheus.Registry
	current atomic.Pointer[prometheus.Registry]
	// owner is the current life's owner while its stages run (the control endpoints).
	owner atomic.Pointer[running]
	// toast warns once per process about tables whose updates may omit unchanged values.
	toast toastWarnings
	// ran is set once a life has started its stages: from then on a failure is not a start-up
	// problem, however soon it comes.
	ran atomic.Bool
	// walsender is the server process of the last life's replication connection (0: none).
	walsender atomic.Uint32
}

func (l *lifeRegistry) Gather() ([]*dto.MetricFamily, error) {
	gs := prometheus.Gatherers{l.base}
	if r := l.current.Load(); r != nil {
		gs = append(gs, r)
	}
	return gs.Gather()
}
