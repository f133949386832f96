package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

func TestStalled(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const after = 5 * time.Minute
	tests := []struct {
		name  string
		s     healthState
		stall bool
	}{
		{"nothing read yet", healthState{}, false},
		{"idle: no part held, watermarks moved", healthState{lastCut: 100, lastCutAt: ago(time.Hour), watermark: 200, watermarkAt: ago(time.Second)}, false},
		{"part held briefly", healthState{heldSince: ago(time.Minute), lastCut: 100, lastCutAt: ago(time.Minute), watermark: 200, watermarkAt: ago(time.Minute)}, false},
		{"part held past the bound, watermarks moved", healthState{heldSince: ago(6 * time.Minute), lastCut: 100, lastCutAt: ago(6 * time.Minute), watermark: 200, watermarkAt: ago(5 * time.Minute)}, true},
		{"held exactly the bound", healthState{heldSince: ago(after), lastCut: 100, watermark: 200}, false},
		{"no cut applied yet, part held long", healthState{heldSince: ago(10 * time.Minute), watermark: 200, watermarkAt: ago(9 * time.Minute)}, true},
		{"held long, watermarks at the last cut", healthState{heldSince: ago(10 * time.Minute), lastCut: 200, lastCutAt: ago(10 * time.Minute), watermark: 200}, false},
		{"held long, no watermark known", healthState{heldSince: ago(10 * time.Minute), lastCut: 100, lastCutAt: ago(10 * time.Minute)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			why := stalled(now, tt.s, after)
			if (why != "") != tt.stall {
				t.Fatalf("stalled = %q, want a stall: %v", why, tt.stall)
			}
			if tt.stall && !strings.Contains(why, "APPLY_STALL_AFTER 5m0s") {
				t.Errorf("reason %q does not name APPLY_STALL_AFTER", why)
			}
		})
	}
}

// fakeWatermark is a cutSource that tells its watermark.
type fakeWatermark struct {
	cutSource
	lsn change.LSN
	at  time.Time
}

func (f *fakeWatermark) Watermark() (change.LSN, time.Time) { return f.lsn, f.at }

// TestHealthz follows the metrics through a stall and its end: /healthz answers 503 with the
// reason while a part is held past the bound, 200 once it is applied; the gauges follow.
func TestHealthz(t *testing.T) {
	m := newMetrics(10 * time.Second)
	get := func() (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		m.healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		body, _ := io.ReadAll(rec.Body)
		return rec.Code, string(body)
	}
	if code, body := get(); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("at start: %d %q", code, body)
	}
	src := &fakeWatermark{lsn: 0x2000, at: time.Now()}
	m.watch(src)
	m.applied(&batch{lsn: 0x1000}, 1, time.Now().Add(-time.Minute))
	m.holding(time.Now().Add(-11 * time.Second))
	code, body := get()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "stalled: nothing applied for 11s") || !strings.Contains(body, "0/2000") {
		t.Errorf("held 11s past a cut at 0/1000, watermark 0/2000: %d %q, want 503 with the reason", code, body)
	}
	m.holding(time.Now()) // still the same part: the time it was taken stays
	if code, _ := get(); code != http.StatusServiceUnavailable {
		t.Errorf("holding the same part again reset the stall: %d", code)
	}
	m.applied(&batch{lsn: 0x2000}, 1, time.Now())
	if code, body := get(); code != http.StatusOK {
		t.Errorf("after the cut applied: %d %q", code, body)
	}
	rec := httptest.NewRecorder()
	m.registryHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{"tidemark_apply_watermark_lsn 8192", "tidemark_apply_last_cut_timestamp_seconds 1."} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
