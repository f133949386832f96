package snapshot

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/secret/secrettest"
)

// TestConnectErrorsHidePassword feeds connection strings holding a known password to New and to
// the worker and exporter connections, against a closed local port, and checks that no error
// text or log line shows it.
func TestConnectErrorsHidePassword(t *testing.T) {
	addr := secrettest.ClosedAddr(t)
	for _, tc := range secrettest.ConnStrings(addr) {
		t.Run(tc.Name, func(t *testing.T) {
			var logs strings.Builder
			s, err := New(Config{ConnString: tc.ConnString, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, nopHooks{})
			if err != nil {
				secrettest.Check(t, "New error", err.Error())
				return
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if conn, err := s.openWorker(ctx, "00000003-00000002-1"); err == nil {
				closeQuietly(conn)
				t.Fatal("openWorker succeeded, want an error")
			} else {
				secrettest.Check(t, "openWorker error", err.Error())
			}
			if x, err := s.openExporter(ctx); err == nil {
				x.abort()
				t.Fatal("openExporter succeeded, want an error")
			} else {
				secrettest.Check(t, "openExporter error", err.Error())
			}
			secrettest.Check(t, "log", logs.String())
		})
	}
}
