package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/monitor"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/secret"
)

// Bounds of every HTTP request, whatever the endpoint. A profile streams for longer: see
// longRunning.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 30 * time.Second
	httpMaxHeaderBytes    = 16 << 10
	httpMaxBodyBytes      = 4 << 10
	// httpResnapshotWait bounds how long a re-copy request waits for the record that makes it
	// durable (a poll of the publication and a batch of the sink), well inside httpWriteTimeout.
	httpResnapshotWait = 10 * time.Second
)

// Serve serves the service's HTTP endpoints on addr (CDC_HTTP_ADDR) until the returned stop
// is called; version is the one GET /status shows.
//
// Open to anyone who reaches the port (probes, Prometheus):
//
//   - GET /healthz: 200 while the process serves (liveness);
//   - GET /readyz: 200 when the pipeline streams and no live table failed, else 503, with the
//     reasons as JSON (readiness), and with a failover slot whether the standby's copy is
//     failover-ready (it does not change the status);
//   - GET /exports: each table's state, phase, watermark and copy progress, as JSON;
//   - GET /metrics: Prometheus metrics of the process and the pipeline;
//   - GET /: the status page, with GET /status and /status/lag (addStatusRoutes).
//
// A failed table's error text can quote row values: without the admin token, /readyz and
// /exports show its class instead (see pipeline.ExportState.RedactError).
//
// Admin, with Authorization: Bearer <CDC_HTTP_TOKEN> (off when no token is configured):
//
//   - POST /exports/{schema.table}/resnapshot: copy one hydrated table again (202 once the
//     request is durable in Kafka, so that it survives a crash of cdc; 404 for a table that is
//     not exported, 409 for one that is not hydrated or left the publication, 503 while the
//     pipeline restarts or when the request could not be made durable within
//     httpResnapshotWait). The request must also have a shape a browser cannot send
//     cross-site (guardStateChange);
//   - GET /debug/pprof/...: profiles, with CDC_HTTP_PPROF=true;
//   - GET /readyz and /exports with the full error texts.
func Serve(addr string, cfg Config, version string, p *pipeline.Pipeline, board *StatusBoard, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("CDC_HTTP_ADDR: listen on %s: %w", addr, err)
	}
	srv := newHTTPServer(cfg, httpHandler(cfg, version, p, board, log), log)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	admin := "off (set CDC_HTTP_TOKEN to enable)"
	if cfg.Token.IsSet() {
		admin = "on, behind CDC_HTTP_TOKEN"
	}
	log.Info("http endpoints listening", "addr", ln.Addr().String(), "admin", admin, "pprof", cfg.Pprof)
	return func() { _ = srv.Close() }, nil
}

// newHTTPServer bounds every phase of a request: the header, the whole request, the answer and
// the wait for the next request on a kept-alive connection. net/http's own complaints about
// clients (a malformed request, a failed TLS handshake) go to log at debug level: anyone who
// reaches the port can cause them.
func newHTTPServer(cfg Config, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      cmp.Or(cfg.WriteTimeout, httpWriteTimeout),
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.With("stage", "http").Handler(), slog.LevelDebug),
	}
}

// resnapshotter is what the re-copy endpoint needs of the pipeline.
type resnapshotter interface {
	Resnapshot(ctx context.Context, e change.ExportID) error
}

// service is what the HTTP endpoints need of the pipeline.
type service interface {
	resnapshotter
	Ready() (bool, []string, []pipeline.ExportState)
	Exports() []pipeline.ExportState
	Failover() *monitor.FailoverState
}

func httpHandler(cfg Config, version string, p *pipeline.Pipeline, board *StatusBoard, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.Metrics(), promhttp.HandlerOpts{}))
	addServiceRoutes(mux, p, cfg.Token, log)
	addStatusRoutes(mux, board, version, cfg.Token, log)
	addPprofRoutes(mux, cfg, log)
	return limitBody(mux)
}

// limitBody caps every request body at httpMaxBodyBytes; no endpoint takes more.
func limitBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, httpMaxBodyBytes)
		h.ServeHTTP(w, r)
	})
}

// addServiceRoutes adds the health, exports and re-copy endpoints.
func addServiceRoutes(mux *http.ServeMux, p service, token secret.Token, log *slog.Logger) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		full, ok := readAccess(w, r, token, log)
		if !ok {
			return
		}
		ready, reasons, failed := p.Ready()
		for _, s := range failed {
			if !full {
				s = s.RedactError(redactNote(token))
			}
			reasons = append(reasons, fmt.Sprintf("%s failed: %s", s.Export, s.Error))
		}
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		// The standby's copy of a failover slot is reported, and does not make cdc unready:
		// cdc streams either way; what it tells is whether a promotion now would keep the slot.
		_ = json.NewEncoder(w).Encode(struct {
			Ready    bool                   `json:"ready"`
			Reasons  []string               `json:"reasons,omitempty"`
			Failover *monitor.FailoverState `json:"failover,omitempty"`
		}{ready, reasons, p.Failover()})
	})
	mux.HandleFunc("GET /exports", func(w http.ResponseWriter, r *http.Request) {
		full, ok := readAccess(w, r, token, log)
		if !ok {
			return
		}
		exports := p.Exports()
		if exports == nil {
			exports = []pipeline.ExportState{}
		}
		if !full {
			for i := range exports {
				exports[i] = exports[i].RedactError(redactNote(token))
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(exports)
	})
	mux.Handle("POST /exports/{export}/resnapshot", guardStateChange(token, "re-copy", log, resnapshotHandler(p, log)))
}

// redactNote says, in place of an error text, how to see it.
func redactNote(token secret.Token) string {
	if token.IsSet() {
		return "the full text needs the admin token"
	}
	return "the full text is in the log, or here with CDC_HTTP_TOKEN set"
}

func resnapshotHandler(p resnapshotter, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		e, err := change.ParseExportID(r.PathValue("export"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), httpResnapshotWait)
		defer cancel()
		switch err := p.Resnapshot(ctx, e); {
		case err == nil:
			log.Info("re-copy requested", "export", e.String(), "remote", r.RemoteAddr)
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, "re-copy of %s started\n", e)
		case errors.Is(err, pipeline.ErrUnknownExport):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, pipeline.ErrNotRunning):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case errors.Is(err, pipeline.ErrNotDurable):
			log.Warn("re-copy not confirmed", "export", e.String(), "remote", r.RemoteAddr, "err", err)
			http.Error(w, err.Error()+"; it may still start: GET /exports shows whether it did, ask again while the table is hydrated", http.StatusServiceUnavailable)
		default:
			http.Error(w, err.Error(), http.StatusConflict)
		}
	}
}

// drainBody reads the (bounded) request body, so that a body over the limit is refused rather
// than ignored: 413.
func drainBody(w http.ResponseWriter, r *http.Request) bool {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, fmt.Sprintf("the request body is larger than %d bytes", httpMaxBodyBytes), http.StatusRequestEntityTooLarge)
			return false
		}
		http.Error(w, "cannot read the request body", http.StatusBadRequest)
		return false
	}
	return true
}
