package integration

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/watermark"
)

// TestRecopyDurable: a re-copy answered 202 survives a crash of cdc at any moment after the
// answer (issue 28). cdc is killed (SIGKILL) a few milliseconds after each 202, at several
// delays, and started again: the restarted cdc copies the table again (its latest hydrated
// record names a higher attempt than before the request), and in the end the table's topic
// holds exactly the table's rows. A writer changes the table throughout, across the kills.
// Both strategies (a chunked re-copy and a copy re-copy announce themselves with different
// records), and both delivery modes (the record is committed in a transaction, or acknowledged).
func TestRecopyDurable(t *testing.T) {
	for _, tc := range []struct{ strategy, delivery string }{
		{"chunked", "exactly-once"},
		{"copy", "exactly-once"},
		{"chunked", "at-least-once"},
	} {
		t.Run(tc.strategy+"/"+tc.delivery, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			const rows = 50_000
			e.createWatermarkTables(rows)
			rec := e.recordWatermarks()
			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.big"
			vars["CDC_SNAPSHOT_STRATEGY"] = tc.strategy
			vars["CDC_DELIVERY"] = tc.delivery
			vars["CDC_HTTP_ADDR"] = freeAddr(t)
			vars["CDC_HTTP_TOKEN"] = httpToken
			url := "http://" + vars["CDC_HTTP_ADDR"] + "/exports/public.big/resnapshot"
			header := map[string]string{"Authorization": "Bearer " + httpToken, "Content-Type": "application/json"}

			p := e.startCDC(vars)
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.big")
			stopBig := e.bigWriter(ctx, rows)
			defer stopBig()

			for _, delay := range []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond} {
				before := e.latestWatermarks()[bigID]
				if before.State != watermark.StateHydrated || before.Snapshot == nil {
					t.Fatalf("big is not hydrated before the request: %+v", before)
				}
				asked := time.Now()
				code, body := httpCall(t, http.MethodPost, url, header, "")
				answered := time.Since(asked)
				if code != http.StatusAccepted {
					t.Fatalf("re-copy request: %d %s; want 202", code, body)
				}
				time.Sleep(delay)
				p.stop(syscall.SIGKILL)

				p = e.startCDC(vars)
				e.waitFor(p, 3*time.Minute, e.currentLSN(ctx), "public.big")
				after := e.latestWatermarks()[bigID]
				if after.State != watermark.StateHydrated {
					// A copy re-copy announced by a record of the old attempt: wait for its copy.
					after = rec.first(t, 3*time.Minute, bigID, "hydrated after the request", func(r watermark.Record) bool {
						return r.State == watermark.StateHydrated && r.Snapshot != nil && r.Snapshot.Attempt > before.Snapshot.Attempt
					})
				}
				got := 0
				if after.Snapshot != nil {
					got = after.Snapshot.Attempt
				}
				t.Logf("killed %s after the 202 (answered in %s): attempt %d before, %d after the restart",
					delay, answered.Round(time.Millisecond), before.Snapshot.Attempt, got)
				if got <= before.Snapshot.Attempt {
					t.Errorf("killed %s after the 202: the re-copy was lost: big stayed hydrated at attempt %d",
						delay, got)
				}
			}

			stopBig()
			e.waitFor(p, 3*time.Minute, e.currentLSN(ctx), "public.big")
			e.assertTopicsEqualTables("public.big")
		})
	}
}
