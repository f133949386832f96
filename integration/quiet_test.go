package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/wait"
	"github.com/tidemark/cdc/pkg/watermark"
)

// TestQuietTables publishes 200 quiet tables (10 rows each, never written) beside 3 busy ones
// that take a steady stream of transactions, with the default watermark interval. At steady
// state the watermark topic must receive records at a rate that does not follow the number of
// quiet tables (each of them alone would write one record per second and up to four while the
// stream moves), and a quiet table's watermark, as a consumer reads it, must reach the server's
// WAL position within 2 s.
func TestQuietTables(t *testing.T) {
	const quiet, busy = 200, 3
	e := newEnv(t)
	var ddl []string
	var tables []string
	for i := range quiet {
		name := fmt.Sprintf("quiet_%03d", i)
		ddl = append(ddl, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int); INSERT INTO %s SELECT g, g FROM generate_series(1, 10) g`, name, name))
		tables = append(tables, "public."+name)
	}
	for i := range busy {
		name := fmt.Sprintf("busy_%d", i)
		ddl = append(ddl, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int); INSERT INTO %s SELECT g, 0 FROM generate_series(1, 100) g`, name, name))
		tables = append(tables, "public."+name)
	}
	e.exec(strings.Join(ddl, ";\n"))
	vars := e.baseVars()
	vars["CDC_TABLES"] = strings.Join(tables, ",")
	vars["CDC_WATERMARK_INTERVAL"] = "1s"
	p := e.startCDC(vars)
	ctx := context.Background()
	e.waitFor(p, 4*time.Minute, e.currentLSN(ctx), tables...)

	// Busy writers: one transaction on one busy table every 20 ms.
	wctx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var written atomic.Int64
	done := make(chan error, 1)
	go func() {
		c, err := pgx.Connect(wctx, e.pgURL)
		if err != nil {
			done <- err
			return
		}
		defer c.Close(context.Background())
		for i := 0; wctx.Err() == nil; i++ {
			if _, err := c.Exec(wctx, fmt.Sprintf("UPDATE busy_%d SET v = v + 1 WHERE id = %d", i%busy, 1+i%100)); err != nil && wctx.Err() == nil {
				done <- err
				return
			}
			written.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
		done <- nil
	}()
	time.Sleep(3 * time.Second) // steady state

	// A consumer's view of quiet tables: time from a WAL position to a watermark past it.
	w, err := wait.New(e.brokers, e.watermarkTopic())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	windowStart := time.Now()
	var lags []time.Duration
	for i := 0; time.Since(windowStart) < 15*time.Second; i++ {
		lsn := e.currentLSN(ctx)
		at := time.Now()
		id, _ := change.ParseExportID(tables[(i*37)%quiet])
		uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := w.Until(uctx, lsn, id); err != nil {
			cancel()
			t.Fatalf("quiet table %s never reached %s: %v", id, lsn, err)
		}
		cancel()
		lags = append(lags, time.Since(at))
		time.Sleep(200 * time.Millisecond)
	}
	windowEnd := time.Now()
	stopWriters()
	if err := <-done; err != nil {
		t.Fatalf("writer: %v", err)
	}

	// Records the watermark topic received in the window, by kind.
	var own, quietRecs, checkpoints int
	for _, r := range e.readTopic(e.watermarkTopic()) {
		if r.Timestamp.Before(windowStart) || r.Timestamp.After(windowEnd) {
			continue
		}
		switch string(r.Key) {
		case watermark.QuietKey:
			quietRecs++
		case watermark.CheckpointKey:
			checkpoints++
		default:
			own++
		}
	}
	secs := windowEnd.Sub(windowStart).Seconds()
	slices.Sort(lags)
	p99 := lags[len(lags)*99/100]
	t.Logf("%d quiet + %d busy tables, %d busy transactions in %.1fs: %.1f export records/s, %.1f quiet records/s, %.1f checkpoints/s; quiet watermark lag over %d samples: p50 %v p99 %v max %v",
		quiet, busy, written.Load(), secs, float64(own)/secs, float64(quietRecs)/secs, float64(checkpoints)/secs,
		len(lags), lags[len(lags)/2], p99, lags[len(lags)-1])
	// 3 busy tables write at most 4 records a second each, the quiet record at most 4.
	if rate := float64(own+quietRecs) / secs; rate > float64(busy*4+4)+2 {
		t.Errorf("%.1f watermark records/s with %d quiet tables; want at most %d (busy tables and the quiet record)", rate, quiet, busy*4+4)
	}
	if quietRecs == 0 {
		t.Errorf("no quiet record in the window")
	}
	if p99 > 2*time.Second {
		t.Errorf("quiet tables' watermark lag p99 %v, want at most 2s", p99)
	}
}
