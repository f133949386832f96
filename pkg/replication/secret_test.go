package replication

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/secret/secrettest"
)

// TestConnectErrorsHidePassword feeds connection strings holding a known password to Run, against
// a closed local port or failing to parse, and checks that neither its error nor its log shows it.
func TestConnectErrorsHidePassword(t *testing.T) {
	addr := secrettest.ClosedAddr(t)
	for _, tc := range secrettest.ConnStrings(addr) {
		t.Run(tc.Name, func(t *testing.T) {
			var logs strings.Builder
			s := New(Config{ConnString: tc.ConnString, Slot: "tidemark", Publication: "tidemark",
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			// One connection attempt: its error.
			err := s.stream(ctx, make(chan *change.Unit, 1))
			if err == nil {
				t.Fatal("stream succeeded, want an error")
			}
			secrettest.Check(t, "connection error", err.Error())
			// Run retries connection errors, logging each: the log lines.
			rctx, rcancel := context.WithTimeout(t.Context(), 1200*time.Millisecond)
			defer rcancel()
			if err := s.Run(rctx, make(chan *change.Unit, 1)); err != nil {
				secrettest.Check(t, "Run error", err.Error())
			}
			secrettest.Check(t, "log", logs.String())
		})
	}
}
