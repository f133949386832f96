package integration

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/watermark"
)

// TestChunkedReadsEachRowOnce copies a freshly loaded table with each strategy and counts the
// rows PostgreSQL read from it (pg_stat_user_tables: seq_tup_read + idx_tup_fetch) during the
// copy: at most 1.05 × the table's rows, so a copy is one pass over the table. Autovacuum is off
// for the table, so no visibility map is set: an index scan fetches every heap row it passes.
// The topic equals the table at the end.
func TestChunkedReadsEachRowOnce(t *testing.T) {
	for _, strategy := range []string{"chunked", "copy"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const rows = 300_000
			e.exec(
				`CREATE TABLE big (id bigint PRIMARY KEY, k int NOT NULL, v text, n numeric(12,2)) WITH (autovacuum_enabled = false)`,
				fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, md5(g::text) || repeat('x', 40), g / 7.0 FROM generate_series(1, %d) g`, rows),
				`ANALYZE big`,
			)
			before := e.rowsRead("big")
			rec := e.recordWatermarks()
			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.big"
			vars["CDC_SNAPSHOT_STRATEGY"] = strategy
			p := e.startCDC(vars)
			hyd := rec.first(t, 5*time.Minute, bigID, "hydrated", func(r watermark.Record) bool { return r.State == watermark.StateHydrated })
			// Its connections close: each backend flushes its counters as it exits.
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("cdc exited with %d", code)
			}
			after := e.rowsRead("big")
			read := after - before
			ratio := float64(read) / rows
			t.Logf("%s: copy of %d rows took %s; PostgreSQL read %d rows of big (%.3f × the table's rows)",
				strategy, rows, hyd.Snapshot.FinishedAt.Sub(hyd.Snapshot.StartedAt).Round(time.Millisecond), read, ratio)
			if ratio > 1.05 {
				t.Errorf("%s copy read %.3f × the table's rows, want at most 1.05", strategy, ratio)
			}
			if ratio < 1 {
				t.Errorf("%s copy read %.3f × the table's rows: the statistics missed part of the copy", strategy, ratio)
			}
			e.assertTopicsEqualTables("public.big")
		})
	}
}

// rowsRead returns the rows PostgreSQL read from table so far (seq_tup_read + idx_tup_fetch),
// once the cumulative statistics stop changing: backends flush them at transaction end, at
// most once a second, and when they exit.
func (e *env) rowsRead(table string) int64 {
	e.t.Helper()
	ctx := context.Background()
	c := e.conn()
	var last int64 = -1
	stable := 0
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var n int64
		// A new transaction each time, without a cached statistics snapshot.
		if _, err := c.Exec(ctx, `SELECT pg_catalog.pg_stat_clear_snapshot()`); err != nil {
			e.t.Fatal(err)
		}
		err := c.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
			FROM pg_catalog.pg_stat_user_tables WHERE relid = $1::regclass`, table).Scan(&n)
		if err != nil {
			e.t.Fatalf("read statistics of %s: %v", table, err)
		}
		if n == last {
			stable++
			if stable >= 3 { // unchanged for 1.5 s: more than the flush interval
				return n
			}
		} else {
			last, stable = n, 0
		}
		time.Sleep(500 * time.Millisecond)
	}
	e.t.Fatalf("the statistics of %s kept changing for a minute", table)
	return 0
}
