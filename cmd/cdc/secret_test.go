package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/secret/secrettest"
)

// TestRunNeverPrintsPassword runs the service with connection strings holding a known password,
// against a closed local port (or failing to parse), in both log formats, and checks everything it
// writes: configuration errors, the start-up log line, connection errors.
func TestRunNeverPrintsPassword(t *testing.T) {
	addr := secrettest.ClosedAddr(t)
	for _, format := range []string{"json", "text"} {
		for _, tc := range secrettest.ConnStrings(addr) {
			t.Run(format+"/"+tc.Name, func(t *testing.T) {
				env := map[string]string{
					"CDC_PG_URL":        tc.ConnString,
					"CDC_KAFKA_BROKERS": addr,
					"CDC_LOG_FORMAT":    format,
					"CDC_SPILL_DIR":     t.TempDir(),
				}
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				var stdout, stderr strings.Builder
				code := run(ctx, []string{"run"}, func(k string) string { return env[k] }, nil, &stdout, &stderr)
				if code == exitOK {
					t.Fatalf("exit code %d, want a failure", code)
				}
				secrettest.Check(t, "stdout", stdout.String())
				secrettest.Check(t, "stderr", stderr.String())
				if testing.Verbose() {
					t.Logf("exit %d\n%s", code, stderr.String())
				}
			})
		}
	}
}

func TestHelpNeverPrintsPassword(t *testing.T) {
	env := map[string]string{"CDC_PG_URL": "postgres://cdc:" + secrettest.Password + "@db/app"}
	var stdout, stderr strings.Builder
	for _, args := range [][]string{{"help"}, {"help", "--markdown"}, {"version"}} {
		run(t.Context(), args, func(k string) string { return env[k] }, nil, &stdout, &stderr)
	}
	secrettest.Check(t, "help", stdout.String()+stderr.String())
}
