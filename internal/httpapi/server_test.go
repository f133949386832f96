package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/monitor"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/secret"
)

const testToken = "test-token-0123456789abcdef"

type fakeResnapshot map[string]error

func (f fakeResnapshot) Resnapshot(_ context.Context, e change.ExportID) error {
	return f[e.String()]
}

// adminRequest is a re-copy request as cdc resnapshot sends it.
func adminRequest(method, path string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader("{}"))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+testToken)
	return r
}

func TestResnapshotHandlerStatus(t *testing.T) {
	f := fakeResnapshot{
		"public.gone": fmt.Errorf("public.gone: %w", pipeline.ErrUnknownExport),
		"public.busy": fmt.Errorf("public.busy is chunking: %w", pipeline.ErrNotHydrated),
		"public.wait": pipeline.ErrNotRunning,
		"public.slow": fmt.Errorf("public.slow: %w: %w", pipeline.ErrNotDurable, context.DeadlineExceeded),
		"public.left": fmt.Errorf("public.left is removing: %w", pipeline.ErrNotStarted),
	}
	mux := http.NewServeMux()
	addServiceRoutes(mux, fakeService{fakeResnapshot: f}, secret.NewToken(testToken), slog.New(slog.DiscardHandler))
	for path, want := range map[string]int{
		"public.orders": http.StatusAccepted, "public.gone": http.StatusNotFound,
		"public.busy": http.StatusConflict, "public.wait": http.StatusServiceUnavailable, `"open`: http.StatusBadRequest,
		"public.slow": http.StatusServiceUnavailable, "public.left": http.StatusConflict,
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, adminRequest(http.MethodPost, "/exports/"+path+"/resnapshot"))
		if rec.Code != want {
			t.Errorf("%s: status %d (%s), want %d", path, rec.Code, rec.Body, want)
		}
	}
}

// countingResnapshot counts the re-copies it was asked for.
type countingResnapshot struct{ n int }

func (c *countingResnapshot) Resnapshot(context.Context, change.ExportID) error { c.n++; return nil }

// TestResnapshotGuard: a re-copy needs the admin token, a JSON content type, a same-origin (or
// non-browser) request and POST; anything else is refused before the pipeline hears of it.
func TestResnapshotGuard(t *testing.T) {
	const path = "/exports/public.orders/resnapshot"
	tests := []struct {
		name   string
		token  string // configured on the service
		mutate func(r *http.Request)
		method string
		want   int
		body   string
	}{
		{name: "admin", token: testToken, want: http.StatusAccepted},
		{name: "no token configured", mutate: func(r *http.Request) { r.Header.Del("Authorization") },
			want: http.StatusForbidden, body: "CDC_HTTP_TOKEN"},
		{name: "no token configured, one sent", want: http.StatusForbidden, body: "is off"},
		{name: "no Authorization", token: testToken, mutate: func(r *http.Request) { r.Header.Del("Authorization") },
			want: http.StatusUnauthorized, body: "needs the admin token"},
		{name: "wrong token", token: testToken, mutate: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken+"x") },
			want: http.StatusUnauthorized, body: "wrong token"},
		{name: "basic auth", token: testToken, mutate: func(r *http.Request) { r.SetBasicAuth("admin", testToken) },
			want: http.StatusUnauthorized},
		{name: "form", token: testToken, mutate: func(r *http.Request) { r.Header.Set("Content-Type", "application/x-www-form-urlencoded") },
			want: http.StatusUnsupportedMediaType},
		{name: "multipart form", token: testToken, mutate: func(r *http.Request) { r.Header.Set("Content-Type", "multipart/form-data; boundary=x") },
			want: http.StatusUnsupportedMediaType},
		{name: "text/plain", token: testToken, mutate: func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") },
			want: http.StatusUnsupportedMediaType},
		{name: "no content type", token: testToken, mutate: func(r *http.Request) { r.Header.Del("Content-Type") },
			want: http.StatusUnsupportedMediaType},
		{name: "cross-site form without token", token: testToken, mutate: func(r *http.Request) {
			r.Header.Del("Authorization")
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("Origin", "https://evil.example")
		}, want: http.StatusForbidden, body: "cross-origin"},
		{name: "cross-site with token", token: testToken, mutate: func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") },
			want: http.StatusForbidden},
		{name: "other origin with token", token: testToken, mutate: func(r *http.Request) { r.Header.Set("Origin", "http://localhost:8000") },
			want: http.StatusForbidden},
		{name: "same origin", token: testToken, mutate: func(r *http.Request) { r.Header.Set("Origin", "http://"+r.Host) },
			want: http.StatusAccepted},
		{name: "body too large", token: testToken, mutate: func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(`{"x":"` + strings.Repeat("a", httpMaxBodyBytes) + `"}`))
		}, want: http.StatusRequestEntityTooLarge},
		{name: "GET", token: testToken, method: http.MethodGet, want: http.StatusMethodNotAllowed},
		{name: "PUT", token: testToken, method: http.MethodPut, want: http.StatusMethodNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c countingResnapshot
			svc := struct {
				*countingResnapshot
				fakeService
			}{&c, fakeService{}}
			mux := http.NewServeMux()
			addServiceRoutes(mux, svc, secret.NewToken(tc.token), slog.New(slog.DiscardHandler))
			r := adminRequest(cmpOr(tc.method, http.MethodPost), path)
			if tc.mutate != nil {
				tc.mutate(r)
			}
			rec := httptest.NewRecorder()
			limitBody(mux).ServeHTTP(rec, r)
			if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.body) {
				t.Fatalf("status %d (%q), want %d with %q", rec.Code, rec.Body, tc.want, tc.body)
			}
			if called := c.n > 0; called != (tc.want == http.StatusAccepted) {
				t.Errorf("re-copy asked %d times with status %d", c.n, rec.Code)
			}
			if strings.Contains(rec.Body.String(), testToken) {
				t.Errorf("the answer shows the token: %s", rec.Body)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type fakeService struct {
	fakeResnapshot
	ready   bool
	reasons []string
	exports []pipeline.ExportState
	// failover: the standby's copy of the slot, as the pipeline sampled it.
	failover *monitor.FailoverState
}

func (f fakeService) Failover() *monitor.FailoverState { return f.failover }

func (f fakeService) Ready() (bool, []string, []pipeline.ExportState) {
	var failed []pipeline.ExportState
	for _, s := range f.exports {
		if s.State == "failed" {
			failed = append(failed, s)
		}
	}
	return f.ready, f.reasons, failed
}

// Exports returns a copy, as the pipeline does.
func (f fakeService) Exports() []pipeline.ExportState {
	return append([]pipeline.ExportState(nil), f.exports...)
}

func TestHealthEndpoints(t *testing.T) {
	w := change.LSN(0x16B4A20)
	const rowValue = "4242-secret-row-value"
	svc := fakeService{ready: false, exports: []pipeline.ExportState{{Export: change.ExportID{Schema: "public", Table: "a"},
		State: "failed", Watermark: &w, Error: "encode column \"v\": " + rowValue + " is not a number", ErrorClass: "a value cannot be encoded"}}}
	for _, token := range []string{"", testToken} {
		mux := http.NewServeMux()
		addServiceRoutes(mux, svc, secret.NewToken(token), slog.New(slog.DiscardHandler))
		get := func(path, auth string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, path, nil)
			if auth != "" {
				r.Header.Set("Authorization", auth)
			}
			mux.ServeHTTP(rec, r)
			return rec
		}
		if rec := get("/healthz", ""); rec.Code != http.StatusOK {
			t.Errorf("/healthz: %d", rec.Code)
		}
		for _, path := range []string{"/readyz", "/exports"} {
			rec := get(path, "")
			if strings.Contains(rec.Body.String(), rowValue) || !strings.Contains(rec.Body.String(), "a value cannot be encoded (the full text") {
				t.Errorf("token %q: %s without the token: %d %s; want the error class only", token, path, rec.Code, rec.Body)
			}
			if rec := get(path, "Bearer wrong-token-0123456789"); rec.Code != http.StatusUnauthorized && rec.Code != http.StatusForbidden ||
				strings.Contains(rec.Body.String(), rowValue) {
				t.Errorf("token %q: %s with a wrong token: %d %s", token, path, rec.Code, rec.Body)
			}
			if token != "" {
				if rec := get(path, "Bearer "+token); !strings.Contains(rec.Body.String(), rowValue) {
					t.Errorf("%s with the token: %d %s; want the full error text", path, rec.Code, rec.Body)
				}
			}
		}
		if rec := get("/readyz", ""); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"public.a failed: a value cannot be encoded`) {
			t.Errorf("/readyz not ready: %d %s", rec.Code, rec.Body)
		}
		if rec := get("/exports", ""); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"export":"public.a"`) || !strings.Contains(rec.Body.String(), `"watermark":"0/16B4A20"`) {
			t.Errorf("/exports: %d %s", rec.Code, rec.Body)
		}
	}
	svc.ready, svc.exports = true, nil
	mux := http.NewServeMux()
	addServiceRoutes(mux, svc, secret.Token{}, slog.New(slog.DiscardHandler))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/readyz ready: %d %s", rec.Code, rec.Body)
	}
}

// startServer serves the pprof routes and a /healthz with newHTTPServer's limits.
func startServer(t *testing.T, cfg Config) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	addPprofRoutes(mux, cfg, slog.New(slog.DiscardHandler))
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = newHTTPServer(cfg, limitBody(mux), slog.New(slog.DiscardHandler))
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestPprof(t *testing.T) {
	get := func(url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	off := startServer(t, Config{Token: secret.NewToken(testToken), IdleTimeout: time.Minute})
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1", "/debug/pprof/cmdline"} {
		if code, body := get(off+p, testToken); code != http.StatusNotFound || !strings.Contains(body, "CDC_HTTP_PPROF=true") {
			t.Errorf("pprof off: %s: %d %q, want 404 saying how to turn it on", p, code, body)
		}
	}
	// A profile longer than the server's write timeout streams to its end.
	on := startServer(t, Config{Token: secret.NewToken(testToken), Pprof: true, IdleTimeout: time.Minute, WriteTimeout: time.Second})
	if code, _ := get(on+"/debug/pprof/heap", ""); code != http.StatusUnauthorized {
		t.Errorf("pprof without the token: %d, want 401", code)
	}
	if code, body := get(on+"/debug/pprof/", testToken); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof index with the token: %d %.200s", code, body)
	}
	if code, body := get(on+"/debug/pprof/profile?seconds=2", testToken); code != http.StatusOK || len(body) == 0 {
		t.Errorf("2 s profile with a 1 s write timeout: %d %.200q", code, body)
	}
	if code, _ := get(on+"/debug/pprof/profile?seconds=100000", testToken); code != http.StatusBadRequest {
		t.Errorf("a profile of 100000 s: %d, want 400", code)
	}
}

// TestIdleConnectionClosed: the server closes a kept-alive connection that sends nothing more
// within the idle timeout, and a connection that never finishes its header within the header
// timeout.
func TestIdleConnectionClosed(t *testing.T) {
	url := startServer(t, Config{IdleTimeout: 300 * time.Millisecond})
	addr := strings.TrimPrefix(url, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("keep-alive request: %d, close %v", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %d bytes, %v after %s; want EOF (closed by the server)", n, err, time.Since(start))
	}
	t.Logf("idle connection closed after %s", time.Since(start).Round(time.Millisecond))
}

// TestSlowHeaderClosed: a client that sends its header a byte at a time (slowloris) is cut off
// at the header timeout, however steadily it trickles.
func TestSlowHeaderClosed(t *testing.T) {
	url := startServer(t, Config{IdleTimeout: time.Minute})
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		_, _ = io.Copy(io.Discard, conn) // the server's answer (408 or nothing), then EOF
		closed <- time.Since(start)
	}()
	header := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1000)
	for i := 0; ; i++ {
		select {
		case took := <-closed:
			if took > httpReadHeaderTimeout+10*time.Second {
				t.Errorf("slow header cut off after %s, want about %s", took, httpReadHeaderTimeout)
			}
			t.Logf("slow header (%d bytes sent) cut off after %s", i, took.Round(time.Millisecond))
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Since(start) > httpReadHeaderTimeout+20*time.Second {
			t.Fatalf("a header trickling for %s is still being read", time.Since(start))
		}
		if _, err := conn.Write([]byte{header[i%len(header)]}); err != nil {
			t.Logf("write after %s: %v", time.Since(start), err)
		}
	}
}

// TestReadyzFailover: /readyz reports the standby's copy of a failover slot, and a copy that
// is not failover-ready does not make cdc unready.
func TestReadyzFailover(t *testing.T) {
	since := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	svc := fakeService{ready: true, failover: &monitor.FailoverState{Standby: "127.0.0.1:5433", Condition: "temporary",
		Reason: "temporary (synchronisation held back)", Since: since, SampledAt: since.Add(12 * time.Second)}}
	mux := http.NewServeMux()
	addServiceRoutes(mux, svc, secret.NewToken(""), slog.New(slog.DiscardHandler))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"failover":{"standby":"127.0.0.1:5433","ready":false,"condition":"temporary"`) {
		t.Errorf("/readyz = %d %s", rec.Code, rec.Body)
	}
}
