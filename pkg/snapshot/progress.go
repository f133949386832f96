package snapshot

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/cdc/internal/burst"
)

// metrics are the stage's Prometheus collectors, labelled by export.
type metrics struct {
	rows      *prometheus.CounterVec
	estimated *prometheus.GaugeVec
	ratio     *prometheus.GaugeVec
	eta       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_snapshot_rows_total",
			Help: "Snapshot rows copied and sent to the sink, per export (all attempts).",
		}, []string{"export"}),
		estimated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidemark_snapshot_rows_estimated",
			Help: "Estimated rows of the export's current snapshot attempt (from pg_class).",
		}, []string{"export"}),
		ratio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidemark_snapshot_progress_ratio",
			Help: "Rows copied over rows estimated for the export's current snapshot attempt, 1 when done.",
		}, []string{"export"}),
		eta: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidemark_snapshot_eta_seconds",
			Help: "Estimated seconds until the export's current snapshot attempt is copied.",
		}, []string{"export"}),
	}
	if reg == nil {
		return m
	}
	m.rows = register(reg, m.rows)
	m.estimated = register(reg, m.estimated)
	m.ratio = register(reg, m.ratio)
	m.eta = register(reg, m.eta)
	return m
}

// register registers c, or returns the collector registered before under the same name (a second
// Stage on the same registry shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// A conflicting collector of another type: keep ours unregistered rather than fail.
	}
	return c
}

// notices log the start and end of each table's copy: one by one while few tables start at
// once, as summaries while many do (10,000 small tables at a start).
type notices struct {
	started, finished *burst.Logger
}

func newNotices(log *slog.Logger) *notices {
	return &notices{
		started:  burst.New(log, "snapshot of table started", "snapshots of tables started"),
		finished: burst.New(log, "snapshot of table finished", "snapshots of tables finished"),
	}
}

// flush logs what the notices hold back (the stage stops).
func (n *notices) flush() {
	n.started.Flush()
	n.finished.Flush()
}

// progress tracks the copy of one export in one request.
type progress struct {
	mu        sync.Mutex
	export    string
	estimated int64
	rows      int64
	start     time.Time
	lastLog   time.Time
	finished  bool
	ok        bool // finished with every row copied
	m         *metrics
	notices   *notices
	log       *slog.Logger
	interval  time.Duration
}

func newProgress(export string, estimated int64, m *metrics, n *notices, log *slog.Logger, interval time.Duration, now time.Time) *progress {
	p := &progress{export: export, estimated: estimated, start: now, m: m, notices: n, log: log, interval: interval}
	m.estimated.WithLabelValues(export).Set(float64(estimated))
	m.ratio.WithLabelValues(export).Set(0)
	m.eta.WithLabelValues(export).Set(0)
	m.rows.WithLabelValues(export).Add(0)
	p.lastLog = now
	n.started.NoteTo(p.log, export, p.attrs(now)...)
	return p
}

// add counts n more rows sent, logging when the interval has passed.
func (p *progress) add(n int, now time.Time) {
	p.m.rows.WithLabelValues(p.export).Add(float64(n))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows += int64(n)
	p.updateGauges(now)
	if !p.finished && now.Sub(p.lastLog) >= p.interval {
		p.lastLog = now
		p.log.Info("snapshot of table in progress", p.attrs(now)...)
	}
}

// tick logs when the interval has passed without rows (a slow range, backpressure).
func (p *progress) tick(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished || now.Sub(p.lastLog) < p.interval {
		return
	}
	p.lastLog = now
	p.updateGauges(now)
	p.log.Info("snapshot of table in progress", p.attrs(now)...)
}

// finish records the end of the export's copy: done, or stopped with a reason.
func (p *progress) finish(now time.Time, stopped string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.finished, p.ok = true, stopped == ""
	if stopped != "" {
		p.log.Warn("snapshot of table stopped", append(p.attrs(now), slog.String("reason", stopped))...)
		return
	}
	p.m.ratio.WithLabelValues(p.export).Set(1)
	p.m.eta.WithLabelValues(p.export).Set(0)
	p.notices.finished.NoteTo(p.log, p.export, append(p.attrs(now), slog.Duration("took", now.Sub(p.start).Round(time.Millisecond)))...)
}

// stats computes rate, ratio and remaining time. Call with p.mu held.
func (p *progress) stats(now time.Time) (rate, ratio float64, eta time.Duration) {
	if el := now.Sub(p.start).Seconds(); el > 0 {
		rate = float64(p.rows) / el
	}
	if p.finished {
		return rate, progressRatio(p.rows, p.estimated, p.ok), 0
	}
	return rate, progressRatio(p.rows, p.estimated, false), estimateETA(p.rows, p.estimated, rate)
}

func (p *progress) updateGauges(now time.Time) {
	_, ratio, eta := p.stats(now)
	p.m.ratio.WithLabelValues(p.export).Set(ratio)
	p.m.eta.WithLabelValues(p.export).Set(eta.Seconds())
}

func (p *progress) attrs(now time.Time) []any {
	rate, ratio, eta := p.stats(now)
	return []any{
		slog.String("export", p.export),
		slog.Int64("rows", p.rows),
		slog.Int64("estimated", p.estimated),
		slog.Float64("percent", float64(int(ratio*1000))/10),
		slog.Float64("rows_per_sec", float64(int64(rate))),
		slog.Duration("eta", eta.Round(time.Second)),
	}
}

// progressRatio is rows/estimated, below 1 until the copy is finished (estimates are estimates).
func progressRatio(rows, estimated int64, finished bool) float64 {
	switch {
	case finished:
		return 1
	case estimated <= 0:
		return 0
	}
	return min(float64(rows)/float64(estimated), 0.99)
}

// estimateETA is the time the remaining estimated rows take at rate; 0 when unknown or overdue.
func estimateETA(rows, estimated int64, rate float64) time.Duration {
	if rate <= 0 || rows >= estimated {
		return 0
	}
	return time.Duration(float64(estimated-rows) / rate * float64(time.Second))
}
