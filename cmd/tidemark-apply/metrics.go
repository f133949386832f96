package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidemark/cdc/pkg/change"
)

// metrics are the applier's Prometheus metrics, and what /healthz decides from.
type metrics struct {
	registry   *prometheus.Registry
	lag        prometheus.Histogram
	rows       prometheus.Counter
	loadRows   prometheus.Counter
	cuts       prometheus.Counter
	lsn        prometheus.Gauge
	lastCutAt  prometheus.Gauge
	stallAfter time.Duration

	// lastApplied is the unix nanoseconds of the last applied cut (0: none yet), lastLSN its
	// LSN.
	lastApplied atomic.Int64
	lastLSN     atomic.Uint64
	// heldSince is the unix nanoseconds since which the applier holds a part (of a cut or of
	// a load) that it has not applied yet; 0 when it holds none. A session that fails keeps
	// it: the next one gets the same part again.
	heldSince atomic.Int64
	// source is the reader of the current session (of the last one between sessions), when it
	// tells its watermark.
	source atomic.Pointer[watermarker]
}

// watermarker is what the health check needs of a cutSource: the highest watermark the reader
// has read, and when it read it (the reader's Watermark).
type watermarker interface {
	Watermark() (change.LSN, time.Time)
}

func newMetrics(stallAfter time.Duration) *metrics {
	m := &metrics{
		registry:   prometheus.NewRegistry(),
		stallAfter: stallAfter,
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tidemark_apply_cut_lag_seconds",
			Help: "From the source commit of a cut's latest transaction to the cut's commit in the target.",
			// 5 ms to about 82 s.
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15),
		}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_apply_rows_applied_total",
			Help: "Row changes applied to the target (copied rows included).",
		}),
		loadRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_apply_load_rows_total",
			Help: "Row changes written to the shadow tables of joining tables (their loads), before the cut that joins them.",
		}),
		cuts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_apply_cuts_applied_total",
			Help: "Cuts applied to the target, each in one transaction.",
		}),
		lsn: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_apply_cut_lsn",
			Help: "LSN of the last cut applied, as a number.",
		}),
		lastCutAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_apply_last_cut_timestamp_seconds",
			Help: "Unix time at which the last cut was applied (0 before the first).",
		}),
	}
	watermark := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tidemark_apply_watermark_lsn",
		Help: "Highest watermark of the chosen tables that the reader has read, as a number: what the cuts can reach.",
	}, func() float64 {
		w, _ := m.watermark()
		return float64(w)
	})
	m.registry.MustRegister(m.lag, m.rows, m.loadRows, m.cuts, m.lsn, m.lastCutAt, watermark,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// watch makes src's watermark the one the health check and the gauge read, if src tells it.
func (m *metrics) watch(src cutSource) {
	if w, ok := src.(watermarker); ok {
		m.source.Store(&w)
	}
}

// watermark is the current reader's highest watermark and when it was read (zero: none).
func (m *metrics) watermark() (change.LSN, time.Time) {
	if w := m.source.Load(); w != nil {
		return (*w).Watermark()
	}
	return 0, time.Time{}
}

// holding records that the applier took a part to apply at now (unless it holds one already).
func (m *metrics) holding(now time.Time) { m.heldSince.CompareAndSwap(0, now.UnixNano()) }

// partApplied records that the part held was applied (a part of a cut not yet committed).
func (m *metrics) partApplied() { m.heldSince.Store(0) }

// loaded records rows written to a shadow table by a load.
func (m *metrics) loaded(rows int) {
	m.loadRows.Add(float64(rows))
	m.heldSince.Store(0)
}

// applied records one applied cut.
func (m *metrics) applied(b *batch, rows int, now time.Time) {
	m.cuts.Inc()
	m.rows.Add(float64(rows))
	m.lsn.Set(float64(b.lsn))
	if lag, ok := lagOf(b, now); ok {
		m.lag.Observe(lag.Seconds())
	}
	m.lastApplied.Store(now.UnixNano())
	m.lastLSN.Store(uint64(b.lsn))
	m.lastCutAt.Set(float64(now.UnixNano()) / 1e9)
	m.heldSince.Store(0)
}

// healthState is what the stall rule looks at.
type healthState struct {
	// heldSince: since when the applier holds a part it has not applied (zero: none).
	heldSince time.Time
	// lastCut and lastCutAt: the last applied cut (zero: none yet).
	lastCut   change.LSN
	lastCutAt time.Time
	// watermark and watermarkAt: the highest watermark read, and when (zero: none).
	watermark   change.LSN
	watermarkAt time.Time
}

// state reads the health state.
func (m *metrics) state() healthState {
	var s healthState
	if ns := m.heldSince.Load(); ns != 0 {
		s.heldSince = time.Unix(0, ns)
	}
	if ns := m.lastApplied.Load(); ns != 0 {
		s.lastCutAt = time.Unix(0, ns)
		s.lastCut = change.LSN(m.lastLSN.Load())
	}
	s.watermark, s.watermarkAt = m.watermark()
	return s
}

// stalled says why the applier is stuck, "" when it is not: it has held a part (of a cut or a
// load) for longer than after without applying it, while the watermarks moved past the last
// applied cut. A reader that waits (nothing to apply, or the cuts held back by cdc: a chosen
// table being copied, a re-copy) holds no part, so waiting is never a stall; neither is a
// long load, whose parts are applied one after another, nor a quiet source.
func stalled(now time.Time, s healthState, after time.Duration) string {
	if after <= 0 || s.heldSince.IsZero() || s.watermark == 0 || s.watermark <= s.lastCut {
		return ""
	}
	held := now.Sub(s.heldSince)
	if held <= after {
		return ""
	}
	last := "no cut applied yet"
	if !s.lastCutAt.IsZero() {
		last = fmt.Sprintf("last cut %s applied %s ago", s.lastCut, now.Sub(s.lastCutAt).Round(time.Second))
	}
	return fmt.Sprintf("stalled: nothing applied for %s (APPLY_STALL_AFTER %s) while the watermarks moved to %s (read %s ago); %s; see the log, and the target's pg_stat_activity for what the applier waits for",
		held.Round(time.Second), after, s.watermark, now.Sub(s.watermarkAt).Round(time.Second), last)
}

// healthz answers 200 "ok", or 503 with the reason when the applier is stalled.
func (m *metrics) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if why := stalled(time.Now(), m.state(), m.stallAfter); why != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(why + "\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// registryHandler serves the metrics in Prometheus's text format.
func (m *metrics) registryHandler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// serveHTTP serves /healthz (200 while the applier applies or has nothing to apply; 503 when
// stalled, see stalled) and /metrics on addr until ctx ends.
func serveHTTP(ctx context.Context, addr string, m *metrics, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.registryHandler())
	mux.HandleFunc("GET /healthz", m.healthz)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Info("serving /healthz and /metrics", "addr", ln.Addr().String())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
