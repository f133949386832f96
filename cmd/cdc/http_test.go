package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
