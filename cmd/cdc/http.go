package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pipeline"
)

// serveHTTP serves the service's HTTP endpoints on addr (CDC_HTTP_ADDR) until the returned stop
// is called:
//
//   - GET /healthz: 200 while the process serves (liveness);
//   - GET /readyz: 200 when the pipeline streams and no live table failed, else 503, with the
//     reasons as JSON (readiness);
//   - GET /exports: each table's state, phase, watermark and copy progress, as JSON;
//   - GET /metrics: Prometheus metrics of the process and the pipeline;
//   - POST /exports/{schema.table}/resnapshot: copy one hydrated table again (202; 404 for a
//     table that is not exported, 409 for one that is not hydrated, 503 while the pipeline
//     restarts);
//   - /debug/pprof/: profiles.
func serveHTTP(addr string, p *pipeline.Pipeline, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("CDC_HTTP_ADDR: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: httpHandler(p, log), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}

// resnapshotter is what the re-copy endpoint needs of the pipeline.
type resnapshotter interface {
	Resnapshot(e change.ExportID) error
}

// service is what the HTTP endpoints need of the pipeline.
type service interface {
	resnapshotter
	Ready() (bool, []string)
	Exports() []pipeline.ExportState
}

func httpHandler(p *pipeline.Pipeline, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.Metrics(), promhttp.HandlerOpts{}))
	addServiceRoutes(mux, p, log)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}

// addServiceRoutes adds the health, exports and re-copy endpoints.
func addServiceRoutes(mux *http.ServeMux, p service, log *slog.Logger) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ready, reasons := p.Ready()
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(struct {
			Ready   bool     `json:"ready"`
			Reasons []string `json:"reasons,omitempty"`
		}{ready, reasons})
	})
	mux.HandleFunc("GET /exports", func(w http.ResponseWriter, r *http.Request) {
		exports := p.Exports()
		if exports == nil {
			exports = []pipeline.ExportState{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(exports)
	})
	mux.Handle("POST /exports/{export}/resnapshot", resnapshotHandler(p, log))
}

func resnapshotHandler(p resnapshotter, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		e, err := change.ParseExportID(r.PathValue("export"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch err := p.Resnapshot(e); {
		case err == nil:
			log.Info("re-copy requested", "export", e.String())
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, "re-copy of %s started\n", e)
		case errors.Is(err, pipeline.ErrUnknownExport):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, pipeline.ErrNotRunning):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			http.Error(w, err.Error(), http.StatusConflict)
		}
	}
}
