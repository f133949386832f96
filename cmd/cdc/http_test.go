package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pipeline"
)

type fakeResnapshot map[string]error

func (f fakeResnapshot) Resnapshot(e change.ExportID) error { return f[e.String()] }

func TestResnapshotHandlerStatus(t *testing.T) {
	f := fakeResnapshot{
		"public.gone": fmt.Errorf("public.gone: %w", pipeline.ErrUnknownExport),
		"public.busy": fmt.Errorf("public.busy is chunking: %w", pipeline.ErrNotHydrated),
		"public.wait": pipeline.ErrNotRunning,
	}
	mux := http.NewServeMux()
	mux.Handle("POST /exports/{export}/resnapshot", resnapshotHandler(f, slog.New(slog.DiscardHandler)))
	for path, want := range map[string]int{
		"public.orders": http.StatusAccepted, "public.gone": http.StatusNotFound,
		"public.busy": http.StatusConflict, "public.wait": http.StatusServiceUnavailable, `"open`: http.StatusBadRequest,
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/exports/"+path+"/resnapshot", nil))
		if rec.Code != want {
			t.Errorf("%s: status %d (%s), want %d", path, rec.Code, rec.Body, want)
		}
	}
}

type fakeService struct {
	fakeResnapshot
	ready   bool
	reasons []string
	exports []pipeline.ExportState
}

func (f fakeService) Ready() (bool, []string)         { return f.ready, f.reasons }
func (f fakeService) Exports() []pipeline.ExportState { return f.exports }

func TestHealthEndpoints(t *testing.T) {
	w := change.LSN(0x16B4A20)
	svc := fakeService{ready: false, reasons: []string{"public.a failed: boom"},
		exports: []pipeline.ExportState{{Export: change.ExportID{Schema: "public", Table: "a"}, State: "failed", Watermark: &w, Error: "boom"}}}
	mux := http.NewServeMux()
	addServiceRoutes(mux, svc, slog.New(slog.DiscardHandler))
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	if rec := get("/healthz"); rec.Code != http.StatusOK {
		t.Errorf("/healthz: %d", rec.Code)
	}
	if rec := get("/readyz"); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"public.a failed: boom"`) {
		t.Errorf("/readyz not ready: %d %s", rec.Code, rec.Body)
	}
	if rec := get("/exports"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"export":"public.a"`) || !strings.Contains(rec.Body.String(), `"watermark":"0/16B4A20"`) {
		t.Errorf("/exports: %d %s", rec.Code, rec.Body)
	}
	svc.ready, svc.reasons = true, nil
	mux = http.NewServeMux()
	addServiceRoutes(mux, svc, slog.New(slog.DiscardHandler))
	if rec := get("/readyz"); rec.Code != http.StatusOK {
		t.Errorf("/readyz ready: %d %s", rec.Code, rec.Body)
	}
}

func TestHealthCommand(t *testing.T) {
	ready := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && !ready {
			http.Error(w, `{"ready":false}`, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	getenv := func(k string) string {
		if k == "CDC_HTTP_ADDR" {
			return strings.TrimPrefix(srv.URL, "http://")
		}
		return ""
	}
	var out, errOut strings.Builder
	if code := run(t.Context(), []string{"health"}, getenv, nil, &out, &errOut); code != exitOK {
		t.Errorf("cdc health: exit %d: %s", code, errOut.String())
	}
	if code := run(t.Context(), []string{"health", "ready"}, getenv, nil, &out, &errOut); code != exitFailed {
		t.Errorf("cdc health ready while not ready: exit %d", code)
	}
	ready = true
	if code := run(t.Context(), []string{"health", "ready"}, getenv, nil, &out, &errOut); code != exitOK {
		t.Errorf("cdc health ready: exit %d: %s", code, errOut.String())
	}
	srv.Close()
	if code := run(t.Context(), []string{"health"}, getenv, nil, &out, &errOut); code != exitFailed {
		t.Errorf("cdc health with the service down: exit %d", code)
	}
}
