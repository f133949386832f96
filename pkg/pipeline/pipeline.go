package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/monitor"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/schemareg"
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
	cfg   Config
	life  *lifeRegistry
	mon   *monitor.Monitor
	lives prometheus.Counter
}

// New returns a pipeline for cfg; nothing is connected until Run.
func New(cfg Config) *Pipeline {
	life := &lifeRegistry{base: prometheus.NewRegistry()}
	life.base.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p := &Pipeline{cfg: cfg.withDefaults(), life: life}
	p.mon = monitor.New(monitor.Config{PGURL: p.cfg.PGURL, Slot: p.cfg.Slot, Timeouts: p.cfg.timeouts(),
		SlotFailover: p.cfg.SlotFailover, Logger: p.cfg.Logger}, monitorSource{p})
	p.lives = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tidemark_pipeline_lives_total",
		Help: "Lives of the pipeline started: 1, plus one per restart after an error (start-up included).",
	})
	life.base.MustRegister(p.mon, p.lives)
	return p
}

// Monitor samples the server's WAL position and the slot for the metrics (lag in seconds, WAL
// the slot retains) until ctx ends or stop is called, across lives: call it once, beside the
// lives. stop returns when sampling ended.
func (p *Pipeline) Monitor(ctx context.Context) (stop func()) { return p.mon.Start(ctx) }

// Failover returns the standby's copy of the failover slot as last sampled: nil without
// CDC_SLOT_FAILOVER, with one host in CDC_PG_URL, or before the first sample.
func (p *Pipeline) Failover() *monitor.FailoverState { return p.mon.Failover() }

// monitorSource is what the monitor reads of the pipeline at scrape time.
type monitorSource struct{ p *Pipeline }

func (s monitorSource) Ready() bool {
	ready, _, _ := s.p.Ready()
	return ready
}

func (s monitorSource) Exports() []monitor.Export {
	states := s.p.Exports()
	out := make([]monitor.Export, len(states))
	for i, e := range states {
		out[i] = monitor.Export{Name: e.Export.String(), State: e.State, Phase: e.Phase, Watermark: e.Watermark}
	}
	return out
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
	// ErrNotStarted: the table left the publication (or was removed) before its re-copy
	// started.
	ErrNotStarted = errNotStarted
	// ErrNotDurable: the re-copy was accepted, but the record announcing it was not durable in
	// Kafka before ctx ended or the pipeline stopped: a crash may lose it. It may still start;
	// the export's state says whether it did.
	ErrNotDurable = errors.New("the re-copy is not durable yet")
)

// Resnapshot copies one hydrated export again while the pipeline runs (a consumer lost its
// state). It returns nil once the request is durable: the watermark record announcing the new
// copy is written to Kafka (committed, in exactly-once mode), so a cdc that crashes afterwards
// copies the table after its restart. That takes a poll of the publication and a batch of the
// sink (typically well under a second); ctx bounds the wait (ErrNotDurable). The copy's
// progress shows in the export's watermark records.
func (p *Pipeline) Resnapshot(ctx context.Context, e change.ExportID) error {
	r := p.life.owner.Load()
	if r == nil {
		return ErrNotRunning
	}
	ev := evResnapshot{e: e, reply: make(chan error, 1), durable: make(chan error, 1)}
	err, qerr := query(ctx, r.owner.inbox, ev, ev.reply)
	switch {
	case qerr != nil && ctx.Err() != nil:
		// Not known whether the owner took it: it may still start.
		return fmt.Errorf("%s: %w: %w", e, ErrNotDurable, ctx.Err())
	case qerr != nil:
		return ErrNotRunning
	case err != nil:
		return err
	}
	select {
	case err := <-ev.durable:
		return err
	case <-r.owner.stopped:
		// The life ended (its drain may still have answered).
		select {
		case err := <-ev.durable:
			return err
		default:
		}
		return fmt.Errorf("%s: %w: the pipeline stopped first", e, ErrNotDurable)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w: %w", e, ErrNotDurable, ctx.Err())
	}
}

// running is a life of the pipeline while its stages run.
type running struct {
	owner *owner
	// streaming reports whether the replication stage streams now.
	streaming func() bool
	// kafkaWaiting is how long the sink's batch in flight has waited for Kafka (0: none).
	kafkaWaiting func() time.Duration
}

// kafkaStall is how long a batch may wait for Kafka before the pipeline is not ready: a batch
// takes milliseconds while Kafka answers.
const kafkaStall = 15 * time.Second

// registryStall is how long the schema registry may fail to answer before the pipeline is not
// ready, as kafkaStall is for Kafka: one failed request (a restart, a dropped connection) is
// retried and costs nothing, and a probe should not take the service out for it.
const registryStall = 15 * time.Second

// registryUnready says why the registry makes the pipeline not ready at now, if it does: it has
// failed for longer than registryStall, or it refuses cdc's TLS or credentials, which retrying
// does not mend (said at once).
func registryUnready(st schemareg.Status, now time.Time) (string, bool) {
	if st.Reachable() {
		return "", false
	}
	d := now.Sub(st.Since)
	switch {
	case errors.Is(st.Err, schemareg.ErrTLS), errors.Is(st.Err, schemareg.ErrUnauthorized):
		return fmt.Sprintf("the schema registry refuses cdc's TLS or credentials (%d attempts in %s; last: %v): the tables whose schemas it must register wait, and nothing is lost",
			st.Attempts, d.Round(time.Second), st.Err), true
	case d > registryStall:
		return fmt.Sprintf("the schema registry has not answered for %s (%d attempts; last: %v): the tables whose schemas it must register wait for it, and nothing is lost",
			d.Round(time.Second), st.Attempts, st.Err), true
	}
	return "", false
}

// states returns every export's state as the owner last published it.
func (r *running) states() []ExportState { return r.owner.exports() }

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
	if reg := p.cfg.Registry; reg != nil {
		if why, ok := registryUnready(reg.Status(), time.Now()); ok {
			reasons = append(reasons, why)
		}
	}
	r := p.life.owner.Load()
	if r == nil {
		return false, append(reasons, "the pipeline is starting or restarting"), nil
	}
	if !r.streaming() {
		reasons = append(reasons, "the replication stage is not streaming (connecting, or waiting for the slot)")
	}
	if r.kafkaWaiting != nil {
		if d := r.kafkaWaiting(); d > kafkaStall {
			reasons = append(reasons, fmt.Sprintf("Kafka has not taken a batch for %s (brokers unreachable, or fewer in-sync replicas than min.insync.replicas): cdc waits, and loses nothing", d.Round(time.Second)))
		}
	}
	for _, a := range []*admission{r.owner.stuckPoll.Load(), r.owner.stuckBegin.Load()} {
		if a != nil {
			reasons = append(reasons, fmt.Sprintf("%d published tables cannot be taken in (their catalog or their Kafka topics) for %s, %d retries: %v",
				len(a.exports), time.Since(a.since).Round(time.Second), a.retries, a.err))
		}
	}
	for _, s := range r.states() {
		if s.State == watermark.StateFailed {
			failed = append(failed, s)
		}
	}
	return len(reasons) == 0 && len(failed) == 0, reasons, failed
}

// Life runs one life of the pipeline: start-up (checks, restore: a plan), the stages that wire
// connects, and an orderly stop. It returns nil once ctx ended (after the orderly stop), or the
// error that ended the life; the caller decides whether another life starts (cmd/cdc retries
// transient errors). attempt numbers the lives from 1.
func (p *Pipeline) Life(ctx context.Context, attempt int) error {
	p.lives.Inc()
	return runOnce(ctx, p.cfg, p.life, attempt)
}

// Ran reports whether a life has started its stages: from then on a failure is not a start-up
// problem, however soon it comes.
func (p *Pipeline) Ran() bool { return p.life.ran.Load() }

// StartupWindow is how long the first life's failures count as start-up problems: a few
// seconds beyond the connect timeout, so that a server that never answers ends the service too.
func (p *Pipeline) StartupWindow() time.Duration { return p.cfg.startupWindow() }

// startupWindow is how long the first attempt's failures count as start-up problems: a few
// seconds beyond the connect timeout, so that a server that never answers ends Run too.
func (cfg Config) startupWindow() time.Duration { return cfg.ConnectTimeout + 5*time.Second }

// timeouts are the bounds of every PostgreSQL connection.
func (cfg Config) timeouts() pgcat.Timeouts {
	return pgcat.Timeouts{Connect: cfg.ConnectTimeout, Receive: cfg.ReceiveTimeout}
}

// withDefaults fills the pipeline's own defaults: names, topic layout, polling and the
// timeouts that span stages. Each stage defaults its own settings (sink.Config, snapshot.Config,
// replication.Config, watermark.Options, codec.Config), so a zero field here stays zero.
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
	if cfg.Sink.WatermarkTopic == "" {
		cfg.Sink.WatermarkTopic = cfg.TopicPrefix + ".__watermarks"
	}
	if cfg.Sink.Partitions <= 0 {
		cfg.Sink.Partitions = 1
	}
	if cfg.Sink.ReplicationFactor == 0 {
		cfg.Sink.ReplicationFactor = -1
	}
	if cfg.PublicationPollInterval <= 0 {
		cfg.PublicationPollInterval = 5 * time.Second
	}
	if cfg.StandbyPoll <= 0 {
		cfg.StandbyPoll = time.Second
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = pgcat.DefaultConnect
	}
	if cfg.ReceiveTimeout <= 0 {
		cfg.ReceiveTimeout = pgcat.DefaultReceive
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	return cfg
}

// lifeRegistry lets the metrics endpoint serve the registry of the current life of the
// pipeline beside the process-wide one.
type lifeRegistry struct {
	base    *prometheus.Registry
	current atomic.Pointer[prometheus.Registry]
	// owner is the current life's owner while its stages run (the control endpoints).
	owner atomic.Pointer[running]
	// toast warns once per process about tables whose updates may omit unchanged values.
	toast pgcat.ToastWarnings
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
