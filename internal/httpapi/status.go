package httpapi

import (
	"compress/gzip"
	"embed"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/tidemark/cdc/pkg/monitor"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/watermark"
)

// statusAssets is the status page: HTML, one script, one style sheet, nothing from elsewhere.
//
//go:embed status/index.html status/app.js status/app.css
var statusAssets embed.FS

// statusMaxLagExports bounds the exports one GET /status/lag asks for (the page asks for the
// rows it shows).
const statusMaxLagExports = 200

// statusPolicy lets the page load only its own script and style sheet and talk only to its own
// origin; no other site may frame it.
const statusPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// exportStatus is one row of the status page: the export's state with its sampled lag and copy
// rate.
type exportStatus struct {
	pipeline.ExportState
	// LagBytes and LagSeconds: how far the watermark is behind the server's WAL at the last
	// sample (absent without a watermark).
	LagBytes   *int64   `json:"lag_bytes,omitempty"`
	LagSeconds *float64 `json:"lag_seconds,omitempty"`
	// RowsPerSecond and ETASeconds: of a copy, from the rows copied over the last samples (up
	// to 30 s) to now.
	RowsPerSecond *float64 `json:"rows_per_second,omitempty"`
	ETASeconds    *float64 `json:"eta_seconds,omitempty"`
}

// connReport is a connection's state with its TLS posture (as the configuration decides it).
type connReport struct {
	connStatus
	TLSMode    string `json:"tls_mode"`
	TLS        string `json:"tls"`
	TLSWarning string `json:"tls_warning,omitempty"`
}

// registryReport is the schema registry: whether it answers the board's check (every 5 s), its
// URL, and, when the registrations that records wait for are failing, since when and how often.
type registryReport struct {
	connStatus
	URL string `json:"url"`
	// WaitingSince, FailedAttempts and LastError: cdc's own requests (a new table or a new shape
	// to register) have failed in a row since then; its records wait, nothing is lost.
	WaitingSince   *time.Time `json:"waiting_since,omitempty"`
	FailedAttempts int        `json:"failed_attempts,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
}

// statusReport is GET /status.
type statusReport struct {
	Version       string    `json:"version"`
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Role: "active" (this instance streams from the slot), "standby" (another process holds
	// the slot; this one waits for it) or "starting" (connecting, or restarting after an error).
	Role     string     `json:"role"`
	Ready    bool       `json:"ready"`
	Reasons  []string   `json:"reasons,omitempty"`
	Postgres connReport `json:"postgres"`
	Kafka    connReport `json:"kafka"`
	// Registry is the schema registry of CDC_VALUE_FORMAT=avro (absent without one).
	Registry *registryReport `json:"schema_registry,omitempty"`
	Slot     slotStatus      `json:"slot"`
	// Failover is the standby's copy of a failover slot (CDC_SLOT_FAILOVER with a standby among
	// CDC_PG_URL's hosts): failover-ready or the condition that fails, and since when.
	Failover *monitor.FailoverState `json:"failover,omitempty"`
	// SampledAt is the last sample of lag, rates and connections, taken every SampleSeconds.
	SampledAt     time.Time `json:"sampled_at,omitzero"`
	SampleSeconds float64   `json:"sample_interval_seconds"`
	// Admin: a token is configured, so re-copy and full error texts are available with it.
	// FullErrors: this answer has the full error texts (the request carried the token).
	Admin      bool `json:"admin"`
	FullErrors bool `json:"full_errors"`
	// Total is how many exports there are, Counts how many in each state, Matched how many
	// the filter matched; Exports is the page of them asked for (Offset, Limit; statusQuery).
	Total   int                     `json:"total"`
	Counts  map[watermark.State]int `json:"counts"`
	Matched int                     `json:"matched"`
	Offset  int                     `json:"offset"`
	Limit   int                     `json:"limit"`
	Exports []exportStatus          `json:"exports"`
}

// report builds GET /status at now; full keeps the error texts, which can quote row values.
func (b *StatusBoard) report(now time.Time, version string, full bool, token secret.Token, sq statusQuery) statusReport {
	ready, reasons, failed := b.src.Ready()
	exports := b.src.Exports()
	b.mu.Lock()
	defer b.mu.Unlock()
	r := statusReport{Version: version, StartedAt: b.started, UptimeSeconds: math.Round(now.Sub(b.started).Seconds()),
		Ready: ready, Reasons: reasons, Postgres: connReport{connStatus: b.pg}, Kafka: connReport{connStatus: b.kafka},
		Slot: b.slot, Failover: b.src.Failover(), SampledAt: b.at, SampleSeconds: statusEvery.Seconds(), Admin: token.IsSet(), FullErrors: full,
		Total: len(exports), Offset: sq.offset, Limit: sq.limit}
	if len(failed) > 0 {
		r.Reasons = append(r.Reasons, "tables failed (see their rows)")
	}
	r.Registry = b.registryReport()
	switch {
	case exports != nil || ready:
		r.Role = "active"
	case b.slot.Active:
		r.Role = "standby"
		r.Reasons = append(r.Reasons, "another process streams from slot "+b.slot.Name+"; this instance takes over when it lets go")
	default:
		r.Role = "starting"
	}
	for _, p := range b.postures {
		c := &r.Kafka
		if p.Conn == "PostgreSQL" {
			c = &r.Postgres
		}
		c.TLSMode, c.TLS, c.TLSWarning = p.Mode, p.Summary, p.Warning
	}
	rows := make([]exportStatus, 0, len(exports))
	for _, s := range exports {
		if !full {
			s = s.RedactError(redactNote(token))
		}
		row := exportStatus{ExportState: s}
		name := s.Export.String()
		if l := b.lag[name]; l != nil {
			if last, ok := l.last(); ok {
				secs := math.Round(float64(last.seconds)*10) / 10
				row.LagBytes, row.LagSeconds = &last.bytes, &secs
			}
		}
		if c := b.copyRateOf(s, now); c != nil {
			if perSec, ok := c.perSecond(s.Rows, now); ok {
				rate := math.Round(perSec)
				row.RowsPerSecond = &rate
				if perSec > 0 && s.Estimated > s.Rows {
					eta := math.Round(float64(s.Estimated-s.Rows) / perSec)
					row.ETASeconds = &eta
				}
			}
		}
		rows = append(rows, row)
	}
	r.Exports, r.Matched, r.Counts = sq.page(rows)
	return r
}

// copyRateOf is the copy rate samples of s's current attempt, nil when s is not copying. A copy
// the board has not sampled yet gets its first sample here, so that a page asking every second
// shows a rate a second after it first saw the copy rather than at the board's next sample (up
// to statusEvery later: a fast copy could be a third done before it). The caller holds b.mu.
func (b *StatusBoard) copyRateOf(s pipeline.ExportState, now time.Time) *copyRate {
	if s.State != watermark.StateHydrating || s.Estimated == 0 && s.Rows == 0 {
		return nil
	}
	name := s.Export.String()
	c := b.rate[name]
	if c == nil || c.attempt != s.Attempt {
		c = &copyRate{attempt: s.Attempt, samples: newRing[copySample](copyRateSamples)}
		c.samples.push(copySample{at: now, rows: s.Rows})
		b.rate[name] = c
	}
	return c
}

// registryReport is the registry's line of GET /status (nil without a registry); the caller
// holds b.mu.
func (b *StatusBoard) registryReport() *registryReport {
	reg := b.cfg.Registry
	if reg == nil {
		return nil
	}
	r := &registryReport{connStatus: b.reg, URL: reg.URL()}
	if st := reg.Status(); !st.Reachable() {
		r.WaitingSince, r.FailedAttempts, r.LastError = &st.Since, st.Attempts, st.Err.Error()
		if r.CheckedAt.Before(st.Since) {
			// cdc's own registrations failed after the board's last check (up to 5 s ago)
			// answered: they are the newer word on the registry.
			r.State, r.Error, r.CheckedAt = "unreachable", st.Err.Error(), st.Since
		}
	}
	return r
}

// lagSeries is one export's lag history in GET /status/lag: parallel arrays, T in seconds
// relative to the answer's time (negative), S the lag in seconds. (The rows of GET /status
// carry the latest lag in bytes.)
type lagSeries struct {
	T []int32   `json:"t"`
	S []float32 `json:"s"`
}

// lagHistory returns the lag history of the named exports (unknown names are left out).
func (b *StatusBoard) lagHistory(names []string) map[string]lagSeries {
	now := time.Now().Unix()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]lagSeries, len(names))
	for _, name := range names {
		r := b.lag[name]
		if r == nil {
			continue
		}
		var s lagSeries
		for v := range r.all() {
			s.T = append(s.T, int32(int64(v.at)-now))
			s.S = append(s.S, float32(math.Round(float64(v.seconds)*10)/10))
		}
		out[name] = s
	}
	return out
}

// addStatusRoutes adds the status page (GET /) and its JSON endpoints:
//
//   - GET /status?offset=&limit=&filter=&sort=&dir=&problems=: the instance (role, readiness,
//     connections with their TLS posture, the slot's retained WAL, version, uptime), the
//     exports' totals, and one page of exports (statusQuery; 100 by default, at most 1,000)
//     with their lag and copy rate. Error texts are redacted without the admin token, as on
//     /exports;
//   - GET /status/lag?export=schema.table&...: the last 15 minutes of lag of up to
//     statusMaxLagExports exports.
func addStatusRoutes(mux *http.ServeMux, b *StatusBoard, version string, token secret.Token, log *slog.Logger) {
	mux.HandleFunc("GET /{$}", asset("status/index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /ui/app.js", asset("status/app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /ui/app.css", asset("status/app.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		full, ok := readAccess(w, r, token, log)
		if !ok {
			return
		}
		sq, err := parseStatusQuery(r.URL.Query())
		if err != nil {
			http.Error(w, "GET /status: "+err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, r, b.report(time.Now(), version, full, token, sq))
	})
	mux.HandleFunc("GET /status/lag", func(w http.ResponseWriter, r *http.Request) {
		names := r.URL.Query()["export"]
		if len(names) > statusMaxLagExports {
			http.Error(w, "ask for at most 200 exports at a time", http.StatusBadRequest)
			return
		}
		writeJSON(w, r, struct {
			Interval float64              `json:"interval_seconds"`
			Window   float64              `json:"window_seconds"`
			Exports  map[string]lagSeries `json:"exports"`
		}{statusEvery.Seconds(), statusWindow.Seconds(), b.lagHistory(names)})
	})
}

// writeJSON answers v as JSON, gzipped when the client takes it (GET /status with 1,000 tables
// is about 250 KB, 7 KB gzipped).
func writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Add("Vary", "Accept-Encoding")
	if !acceptsGzip(r) {
		_ = json.NewEncoder(w).Encode(v)
		return
	}
	h.Set("Content-Encoding", "gzip")
	zw := gzip.NewWriter(w)
	_ = json.NewEncoder(zw).Encode(v)
	_ = zw.Close()
}

// acceptsGzip reports whether the request's Accept-Encoding names gzip (and does not refuse it
// with q=0).
func acceptsGzip(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept-Encoding"), ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") {
			q := strings.ReplaceAll(params, " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

// asset serves one embedded file of the status page.
func asset(name, ctype string) http.HandlerFunc {
	body, err := statusAssets.ReadFile(name)
	if err != nil {
		panic("status page asset missing: " + name) // embedded at build time
	}
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Content-Security-Policy", statusPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	}
}
