package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/wait"
)

// manyResult is the many scenario (issue 32): a publication FOR ALL TABLES of -many-tables
// tables of 10 rows, beside one busy table written all along.
type manyResult struct {
	Tables         int     `json:"tables"`
	HydrateSeconds float64 `json:"seconds_from_start_to_all_hydrated"`
	PeakRSSMiB     float64 `json:"cdc_peak_rss_mib"`
	CPUSeconds     float64 `json:"cdc_cpu_seconds"`
	// Watermark records per second once every table is hydrated and nothing is written.
	IdleRecordsPerSec float64 `json:"idle_watermark_records_per_second"`
	// The busy table's watermark lag as a consumer reads it (pkg/wait) while the others
	// hydrate: from reading the server's WAL position to its watermark at or past it.
	BusyLagSamples int     `json:"busy_lag_samples"`
	BusyLagP50Sec  float64 `json:"busy_lag_p50_seconds"`
	BusyLagP99Sec  float64 `json:"busy_lag_p99_seconds"`
	BusyLagMaxSec  float64 `json:"busy_lag_max_seconds"`
	// The bench's own CPU (its watermark readers, the busy table's writer, the lag sampler)
	// from cdc's start to all hydrated: what the measurement took from the two cores.
	BenchCPUSeconds float64 `json:"bench_cpu_seconds_while_hydrating"`
	// The busy table's lag for manyHydratedLag once every table is hydrated.
	HydratedLagSamples int     `json:"hydrated_busy_lag_samples"`
	HydratedLagP50Sec  float64 `json:"hydrated_busy_lag_p50_seconds"`
	HydratedLagP99Sec  float64 `json:"hydrated_busy_lag_p99_seconds"`
	// GET /status (its default page) and GET /status?limit=1000, once hydrated.
	StatusBytes     int     `json:"status_bytes"`
	StatusSeconds   float64 `json:"status_seconds"`
	Status1kBytes   int     `json:"status_1000_rows_bytes"`
	Status1kSeconds float64 `json:"status_1000_rows_seconds"`
}

// many creates -many-tables tables of 10 rows and one busy table (100 transactions a second from
// before cdc starts), publishes them all (FOR ALL TABLES), and measures the time from cdc's start
// to all hydrated, cdc's peak RSS, the busy table's watermark lag while the others hydrate, the
// watermark records per second once idle, and GET /status.
func (b *bench) many(ctx context.Context) (*manyResult, error) {
	res := &manyResult{Tables: b.o.manyTables}
	s, err := b.newScenario(ctx, "many")
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	_, all, err := s.createQuietBusyTables(ctx, b.o.manyTables, 1)
	if err != nil {
		return res, err
	}
	busy := all[len(all)-1]
	writer, err := startSteadyWriter(ctx, s.db.url, 10*time.Millisecond, func(i int) (string, []any) {
		return "UPDATE " + busy.String() + " SET v = v + 1 WHERE id = $1", []any{1 + i%1000}
	})
	if err != nil {
		return res, err
	}
	defer writer.stop()
	ports, err := testsvc.FreePorts(1)
	if err != nil {
		return res, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	vars := map[string]string{"CDC_PUBLICATION_POLL_INTERVAL": "1s", "CDC_HTTP_ADDR": addr}
	var pr *profiler
	if b.o.manyProfile > 0 {
		if pr, err = newProfiler(b.o.manyProfile, filepath.Join(b.work, "many-cpu.pprof")); err != nil {
			return res, err
		}
		maps.Copy(vars, pr.vars())
		addr = pr.addr
	}
	p, err := s.startCDC(vars)
	if err != nil {
		return res, err
	}
	defer p.stop(time.Minute)
	if pr != nil {
		go func() {
			time.Sleep(time.Duration(b.o.manyProfileFrom) * time.Second)
			var err error
			for range 40 { // cdc's HTTP endpoints answer once it has read its configuration
				if _, err = pr.fetch(ctx); err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			if err != nil {
				b.logf("many: %v", err)
			} else {
				b.logf("many: cdc CPU profile of %ds from %ds after its start in %s", pr.seconds, b.o.manyProfileFrom, pr.file)
			}
		}()
	}
	lctx, stopLag := context.WithCancel(ctx)
	var lags []float64
	var lagErr error
	var wg sync.WaitGroup
	wg.Go(func() { lags, lagErr = s.busyLag(lctx, busy) })
	hydrated := &tablesResult{}
	benchCPU := selfCPU()
	err = s.hydrateAll(ctx, p, all, hydrated)
	res.BenchCPUSeconds = selfCPU() - benchCPU
	stopLag()
	wg.Wait()
	if err != nil {
		return res, err
	}
	res.HydrateSeconds = hydrated.HydrateSeconds
	if pr != nil {
		if err := pr.save(ctx, "allocs", filepath.Join(b.work, "many-allocs.pprof")); err != nil {
			b.logf("many: %v", err)
		}
	}
	if lagErr != nil {
		return res, lagErr
	}
	slices.Sort(lags)
	if res.BusyLagSamples = len(lags); len(lags) > 0 {
		res.BusyLagP50Sec, res.BusyLagP99Sec, res.BusyLagMaxSec = lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1]
	}
	// The same lag once every table is hydrated, for manyHydratedLag: what the table count
	// costs a busy table after the copies.
	hctx, stopHydratedLag := context.WithTimeout(ctx, manyHydratedLag)
	lags, lagErr = s.busyLag(hctx, busy)
	stopHydratedLag()
	if lagErr != nil {
		return res, lagErr
	}
	slices.Sort(lags)
	if res.HydratedLagSamples = len(lags); len(lags) > 0 {
		res.HydratedLagP50Sec, res.HydratedLagP99Sec = lags[len(lags)/2], lags[len(lags)*99/100]
	}
	if err := writer.stop(); err != nil {
		return res, err
	}
	if err := s.manyIdle(ctx, addr, res); err != nil {
		return res, err
	}
	if err := p.stop(time.Minute); err != nil {
		return res, err
	}
	res.CPUSeconds, res.PeakRSSMiB = p.usage()
	b.logf("many: %d tables hydrated in %.1fs, peak RSS %.0f MiB, busy lag p99 %.2fs, %.1f idle records/s, /status %d bytes, bench's own CPU while hydrating %.1fs",
		res.Tables, res.HydrateSeconds, res.PeakRSSMiB, res.BusyLagP99Sec, res.IdleRecordsPerSec, res.StatusBytes, res.BenchCPUSeconds)
	return res, nil
}

// manyHydratedLag is how long the many scenario samples the busy table's lag once every table
// is hydrated.
const manyHydratedLag = 10 * time.Second

// busyLag samples the busy table's watermark lag until ctx ends, from its first watermark on;
// the sample open when ctx ends counts with the time it waited so far.
func (s *scenario) busyLag(ctx context.Context, busy change.ExportID) ([]float64, error) {
	// The watermark topic exists once cdc made it: a reader made before would not see it.
	for {
		topics, err := s.b.k.adm.ListTopics(ctx, s.watermarkTopic())
		if ctx.Err() != nil {
			return nil, nil
		}
		if err == nil && topics.Has(s.watermarkTopic()) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	w, err := wait.New(s.b.svc.brokers, s.watermarkTopic())
	if err != nil {
		return nil, err
	}
	defer w.Close()
	conn, err := pgx.Connect(ctx, s.db.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if _, err := w.Until(ctx, 0, busy); err != nil { // its first watermark: hydrated
		return nil, nil // every table hydrated before the busy one had a watermark
	}
	var lags []float64
	for ctx.Err() == nil {
		lsn, err := currentLSN(ctx, conn)
		if err != nil {
			break
		}
		at := time.Now()
		recs, err := w.Until(ctx, lsn, busy)
		// A sample still open when the others are hydrated counts as the lag so far (at least).
		lags = append(lags, time.Since(at).Seconds())
		if lag := time.Since(at); lag > time.Second {
			// When cdc made the record that answered, beside when the bench read it: a bench
			// too slow to read the watermark topic shows as the difference.
			made := ""
			if r, ok := recs[busy]; ok && !r.Time.IsZero() {
				made = fmt.Sprintf(" (its watermark record made %.2fs after)", r.Time.Sub(at).Seconds())
			}
			s.b.logf("many: busy table lag %.2fs, sampled from %s%s", lag.Seconds(), at.Format("15:04:05.000"), made)
		}
		if err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return lags, nil
}

// manyIdle counts the watermark records of a 10 s idle window (after 3 s to settle) and
// times GET /status.
func (s *scenario) manyIdle(ctx context.Context, addr string, res *manyResult) error {
	time.Sleep(3 * time.Second)
	start := time.Now()
	time.Sleep(10 * time.Second)
	end := time.Now()
	own, quiet, cp, err := countWatermarkRecords(ctx, s.b.svc.brokers, s.watermarkTopic(), start, end)
	if err != nil {
		return err
	}
	res.IdleRecordsPerSec = float64(own+quiet+cp) / end.Sub(start).Seconds()
	get := func(path string) (int, float64, error) {
		t0 := time.Now()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return len(body), time.Since(t0).Seconds(), err
	}
	if res.StatusBytes, res.StatusSeconds, err = get("/status"); err != nil {
		return err
	}
	res.Status1kBytes, res.Status1kSeconds, err = get("/status?limit=1000")
	return err
}

func printMany(w io.Writer, r *manyResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nMany tables (FOR ALL TABLES): %d tables of 10 rows + 1 busy table (100 transactions/s)\n", r.Tables)
	fmt.Fprintf(w, "   start -> all hydrated %.1fs (target <= 60s at 10,000); cdc CPU %.1fs, peak RSS %.0f MiB (target <= 256 MiB)\n",
		r.HydrateSeconds, r.CPUSeconds, r.PeakRSSMiB)
	fmt.Fprintf(w, "   the bench's own CPU meanwhile (its watermark readers, writer and lag sampler) %.1fs\n", r.BenchCPUSeconds)
	fmt.Fprintf(w, "   busy table watermark lag while the others hydrate (%d samples): p50 %.2fs p99 %.2fs max %.2fs (target p99 < 1s)\n",
		r.BusyLagSamples, r.BusyLagP50Sec, r.BusyLagP99Sec, r.BusyLagMaxSec)
	fmt.Fprintf(w, "   the same once all are hydrated (%d samples in %s): p50 %.2fs p99 %.2fs\n",
		r.HydratedLagSamples, manyHydratedLag, r.HydratedLagP50Sec, r.HydratedLagP99Sec)
	fmt.Fprintf(w, "   idle: %.1f watermark records/s (target <= 2); GET /status %d bytes in %.3fs, ?limit=1000 %d bytes in %.3fs\n",
		r.IdleRecordsPerSec, r.StatusBytes, r.StatusSeconds, r.Status1kBytes, r.Status1kSeconds)
}
