package httpapi

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/posture"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/kafkaconn"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/watermark"
)

// TestStatusAssets: the page stays small and loads nothing from elsewhere.
func TestStatusAssets(t *testing.T) {
	total := 0
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(statusAssets, "status", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := statusAssets.ReadFile(path)
		if err != nil {
			return err
		}
		total += len(b)
		for _, m := range external.FindAllString(string(b), -1) {
			if m != "http://www.w3.org" { // the SVG namespace, not a fetch
				t.Errorf("%s refers to %s: the page must not load anything from elsewhere", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status page: %d bytes", total)
	if total >= 100<<10 {
		t.Errorf("the status page is %d bytes, want under 100 KB", total)
	}
}

func newTestBoard(src Source) *StatusBoard {
	return NewStatusBoard(pipeline.Config{Slot: "tidemark"}, []posture.Posture{posture.Kafka(kafkaconn.Security{})}, src, slog.New(slog.DiscardHandler))
}

func statusMux(b *StatusBoard, token secret.Token) *http.ServeMux {
	mux := http.NewServeMux()
	addStatusRoutes(mux, b, "v1.2.3", token, slog.New(slog.DiscardHandler))
	return mux
}

func lsn(v uint64) *change.LSN { l := change.LSN(v); return &l }

// TestStatusRedactsErrors: /status shows a failed table's error text only with the token, as
// /exports does; a wrong token is refused.
func TestStatusRedactsErrors(t *testing.T) {
	const rowValue = "card 4111-1111"
	src := fakeService{exports: []pipeline.ExportState{
		{Export: change.ExportID{Schema: "public", Table: "orders"}, State: watermark.StateFailed, Error: "encode " + rowValue, ErrorClass: "encoding"},
	}}
	mux := statusMux(newTestBoard(src), secret.NewToken(testToken))
	for _, tc := range []struct {
		name, auth string
		code       int
		shows      bool
	}{
		{"no token", "", http.StatusOK, false},
		{"token", "Bearer " + testToken, http.StatusOK, true},
		{"wrong token", "Bearer not-" + testToken, http.StatusUnauthorized, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/status", nil)
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, r)
			body := rec.Body.String()
			if rec.Code != tc.code || strings.Contains(body, rowValue) != tc.shows {
				t.Fatalf("status %d, shows the value %v: %s", rec.Code, strings.Contains(body, rowValue), body)
			}
			if tc.code == http.StatusOK && !tc.shows && !strings.Contains(body, "encoding (the full text needs the admin token)") {
				t.Errorf("the redacted answer does not name the class: %s", body)
			}
		})
	}
}

// TestStatusRole: active while the pipeline runs, standby while another process holds the
// slot, starting otherwise.
func TestStatusRole(t *testing.T) {
	one := []pipeline.ExportState{{Export: change.ExportID{Schema: "public", Table: "a"}, State: watermark.StateHydrated}}
	for _, tc := range []struct {
		name       string
		src        fakeService
		slotActive bool
		want       string
	}{
		{"running", fakeService{exports: one}, true, "active"},
		{"running, no tables", fakeService{ready: true}, true, "active"},
		{"slot held by another", fakeService{}, true, "standby"},
		{"starting", fakeService{}, false, "starting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBoard(tc.src)
			b.slot.Active = tc.slotActive
			if got := b.report(time.Now(), "v", false, secret.Token{}, statusQuery{limit: statusDefaultLimit}).Role; got != tc.want {
				t.Errorf("role %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStatusLag: lag in bytes against the last WAL sample, in seconds since the WAL passed the
// watermark.
func TestStatusLag(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	b := newTestBoard(fakeService{})
	for i, pos := range []uint64{100, 200, 300, 400} { // one sample every 5 s
		b.wal.push(walSample{at: t0.Add(time.Duration(i) * statusEvery), lsn: change.LSN(pos)})
	}
	now := t0.Add(16 * time.Second)
	for _, tc := range []struct {
		name      string
		state     watermark.State
		watermark *change.LSN
		ok        bool
		bytes     int64
		seconds   float64
	}{
		{"caught up", watermark.StateHydrated, lsn(400), true, 0, 0},
		{"ahead of the sample", watermark.StateHydrated, lsn(450), true, 0, 0},
		{"passed at the last sample", watermark.StateHydrated, lsn(350), true, 50, 1},
		{"passed two samples ago", watermark.StateHydrated, lsn(250), true, 150, 6},
		{"older than the window", watermark.StateHydrated, lsn(50), true, 350, 16},
		{"no watermark yet", watermark.StateHydrating, nil, false, 0, 0},
		{"removed", watermark.StateRemoved, lsn(50), false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bytes, secs, ok := b.lagOf(pipeline.ExportState{State: tc.state, Watermark: tc.watermark}, now)
			if ok != tc.ok || bytes != tc.bytes || secs != tc.seconds {
				t.Errorf("lag %d bytes, %gs, ok %v; want %d, %gs, %v", bytes, secs, ok, tc.bytes, tc.seconds, tc.ok)
			}
		})
	}
}

// TestStatusCopyRateBeforeTheFirstSample: a copy the board has not sampled yet (it started after
// the last sample, up to 5 s ago) shows a rate a second after a request first saw it, not at the
// next sample. (TestStatusPage saw a fast copy a third done with no rate on the page.)
func TestStatusCopyRateBeforeTheFirstSample(t *testing.T) {
	big := change.ExportID{Schema: "public", Table: "big"}
	src := &fakeService{exports: []pipeline.ExportState{{Export: big, State: watermark.StateHydrating, Attempt: 1, Rows: 1000, Estimated: 101_000}}}
	b := newTestBoard(src)
	t0 := time.Now()
	q := statusQuery{limit: statusDefaultLimit}
	if rows := b.report(t0, "v", false, secret.Token{}, q).Exports; rows[0].RowsPerSecond != nil {
		t.Errorf("a rate from one look: %v rows/s", *rows[0].RowsPerSecond)
	}
	src.exports[0].Rows = 21_000
	rows := b.report(t0.Add(2*time.Second), "v", false, secret.Token{}, q).Exports
	if rows[0].RowsPerSecond == nil || *rows[0].RowsPerSecond != 10_000 || rows[0].ETASeconds == nil || *rows[0].ETASeconds != 8 {
		t.Fatalf("rows %+v: want 10000 rows/s, ETA 8s two seconds after the first look", rows)
	}
}

// TestStatusCopyRate: rows/s and ETA come from the rows copied between two samples, and the
// lag history is bounded and forgets removed exports.
func TestStatusCopyRate(t *testing.T) {
	big := change.ExportID{Schema: "public", Table: "big"}
	src := &fakeService{exports: []pipeline.ExportState{{Export: big, State: watermark.StateHydrating, Attempt: 1, Rows: 1000, Estimated: 101_000}}}
	b := newTestBoard(src)
	t0 := time.Now()
	b.sampleExports(t0)
	if rows := b.report(t0.Add(500*time.Millisecond), "v", false, secret.Token{}, statusQuery{limit: statusDefaultLimit}).Exports; rows[0].RowsPerSecond != nil {
		t.Errorf("a rate after half a second: %v rows/s", *rows[0].RowsPerSecond)
	}
	src.exports[0].Rows = 26_000
	b.sampleExports(t0.Add(5 * time.Second))
	src.exports[0].Rows = 51_000 // the live count, read at the request
	rows := b.report(t0.Add(10*time.Second), "v", false, secret.Token{}, statusQuery{limit: statusDefaultLimit}).Exports
	if len(rows) != 1 || rows[0].RowsPerSecond == nil || *rows[0].RowsPerSecond != 5000 || rows[0].ETASeconds == nil || *rows[0].ETASeconds != 10 {
		t.Fatalf("rows %+v: want 5000 rows/s, ETA 10s", rows)
	}
	src.exports[0].Attempt = 2 // a new attempt starts a new measure
	if rows := b.report(t0.Add(10*time.Second), "v", false, secret.Token{}, statusQuery{limit: statusDefaultLimit}).Exports; rows[0].RowsPerSecond != nil {
		t.Errorf("attempt 2 has attempt 1's rate: %v rows/s", *rows[0].RowsPerSecond)
	}

	b.wal.push(walSample{at: t0, lsn: 10})
	src.exports[0] = pipeline.ExportState{Export: big, State: watermark.StateHydrated, Watermark: lsn(10)}
	for i := range statusRing + 10 {
		b.sampleExports(t0.Add(time.Duration(i) * statusEvery))
	}
	if n := len(b.lag["public.big"].buf); n != statusRing {
		t.Errorf("%d lag samples kept, want %d", n, statusRing)
	}
	src.exports = nil
	b.sampleExports(t0)
	if len(b.lag) != 0 || len(b.rate) != 0 {
		t.Errorf("a removed export's history is kept: %d lag, %d rate", len(b.lag), len(b.rate))
	}
}

// A ring grows as values come, keeps the last size of them, oldest first.
func TestRing(t *testing.T) {
	r := newRing[int](5)
	if _, ok := r.first(); ok {
		t.Fatal("an empty ring has a first value")
	}
	if got := slices.Collect(r.all()); len(got) != 0 {
		t.Fatalf("empty ring yields %v", got)
	}
	for i := 1; i <= 12; i++ {
		r.push(i)
		lo := max(1, i-4)
		want := make([]int, 0, 5)
		for v := lo; v <= i; v++ {
			want = append(want, v)
		}
		if got := slices.Collect(r.all()); !slices.Equal(got, want) {
			t.Fatalf("after %d pushes: %v, want %v", i, got, want)
		}
		if f, _ := r.first(); f != lo {
			t.Fatalf("after %d pushes: first %d, want %d", i, f, lo)
		}
		if l, _ := r.last(); l != i {
			t.Fatalf("after %d pushes: last %d, want %d", i, l, i)
		}
		if cap(r.buf) > 5 {
			t.Fatalf("after %d pushes: buffer of %d for a ring of 5", i, cap(r.buf))
		}
	}
}

func TestStatusLagEndpoint(t *testing.T) {
	b := newTestBoard(fakeService{})
	r := newRing[lagSample](statusRing)
	now := time.Now()
	r.push(lagSample{at: uint32(now.Add(-10 * time.Second).Unix()), seconds: 2.25, bytes: 10})
	r.push(lagSample{at: uint32(now.Unix()), seconds: 0, bytes: 0})
	b.lag["public.a"] = &r
	mux := statusMux(b, secret.Token{})

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status/lag?export=public.a&export=public.unknown", nil))
	var got struct {
		Exports map[string]lagSeries `json:"exports"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("%d %v: %s", rec.Code, err, rec.Body)
	}
	a, ok := got.Exports["public.a"]
	if !ok || len(got.Exports) != 1 || !slices.Equal(a.S, []float32{2.3, 0}) || len(a.T) != 2 || a.T[0] > -9 || a.T[0] < -11 {
		t.Errorf("lag history %+v", got.Exports)
	}

	q := strings.Repeat("export=public.x&", statusMaxLagExports+1)
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status/lag?"+q, nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("%d exports at once: %d, want 400", statusMaxLagExports+1, rec.Code)
	}
}

// TestStatusPageHeaders: the page is served with a policy that lets it load only itself.
func TestStatusPageHeaders(t *testing.T) {
	mux := statusMux(newTestBoard(fakeService{}), secret.Token{})
	for _, path := range []string{"/", "/ui/app.js", "/ui/app.css"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Security-Policy") != statusPolicy ||
			rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d %v", path, rec.Code, rec.Header())
		}
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nothing", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /nothing: %d, want 404 (only / is the page)", rec.Code)
	}
}

// TestStatusGzip: /status is gzipped for clients that take it, plain for the others.
func TestStatusGzip(t *testing.T) {
	mux := statusMux(newTestBoard(fakeService{}), secret.Token{})
	for _, tc := range []struct {
		accept string
		gzip   bool
	}{{"", false}, {"gzip, deflate, br", true}, {"br;q=1.0, GZIP;q=0.5", true}, {"gzip;q=0", false}, {"deflate", false}} {
		r := httptest.NewRequest(http.MethodGet, "/status", nil)
		r.Header.Set("Accept-Encoding", tc.accept)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		body := io.Reader(rec.Body)
		if got := rec.Header().Get("Content-Encoding") == "gzip"; got != tc.gzip {
			t.Errorf("Accept-Encoding %q: gzipped %v, want %v", tc.accept, got, tc.gzip)
			continue
		}
		if tc.gzip {
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			body = zr
		}
		var rep statusReport
		if err := json.NewDecoder(body).Decode(&rep); err != nil || rep.Version != "v1.2.3" {
			t.Errorf("Accept-Encoding %q: %v, version %q", tc.accept, err, rep.Version)
		}
	}
}
