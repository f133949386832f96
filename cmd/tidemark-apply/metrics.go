package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the applier's Prometheus metrics.
type metrics struct {
	registry *prometheus.Registry
	lag      prometheus.Histogram
	rows     prometheus.Counter
	loadRows prometheus.Counter
	cuts     prometheus.Counter
	lsn      prometheus.Gauge
	// lastApplied is the unix nanoseconds of the last applied cut (0: none yet).
	lastApplied atomic.Int64
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
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
	}
	m.registry.MustRegister(m.lag, m.rows, m.loadRows, m.cuts, m.lsn,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// loaded records rows written to a shadow table by a load.
func (m *metrics) loaded(rows int) { m.loadRows.Add(float64(rows)) }

// applied records one applied cut.
func (m *metrics) applied(b *batch, rows int, now time.Time) {
	m.cuts.Inc()
	m.rows.Add(float64(rows))
	m.lsn.Set(float64(b.lsn))
	if lag, ok := lagOf(b, now); ok {
		m.lag.Observe(lag.Seconds())
	}
	m.lastApplied.Store(now.UnixNano())
}

// serveHTTP serves /healthz (200 while the process runs its loop) and /metrics on addr until
// ctx ends.
func serveHTTP(ctx context.Context, addr string, m *metrics, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
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
