package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/wait"
	"github.com/tidemark/cdc/pkg/watermark"
)

// tablesResult is the many-tables scenario: many quiet tables beside a few busy ones.
type tablesResult struct {
	Quiet          int     `json:"quiet_tables"`
	Busy           int     `json:"busy_tables"`
	HydrateSeconds float64 `json:"seconds_from_start_to_all_hydrated"`
	Topics         int     `json:"topics_created"`
	WindowSeconds  float64 `json:"window_seconds"`
	BusyTxns       int64   `json:"busy_transactions"`
	// Records written to the watermark topic per second in the steady-state window, by kind.
	OwnPerSec        float64 `json:"export_records_per_second"`
	QuietPerSec      float64 `json:"quiet_records_per_second"`
	CheckpointPerSec float64 `json:"checkpoints_per_second"`
	// Lag of a quiet table's watermark as a consumer (pkg/wait) reads it: from reading the
	// server's WAL position to a watermark at or past it.
	LagSamples int     `json:"lag_samples"`
	LagP50Sec  float64 `json:"lag_p50_seconds"`
	LagP99Sec  float64 `json:"lag_p99_seconds"`
	LagMaxSec  float64 `json:"lag_max_seconds"`
	CPUSeconds float64 `json:"cdc_cpu_seconds"`
	PeakRSSMiB float64 `json:"cdc_peak_rss_mib"`
}

// tables publishes -quiet-tables tables of 10 rows that never change and 10 busy tables taking
// 100 transactions a second, all in one publication (FOR ALL TABLES), and measures the time to
// hydrate them all, the watermark records per second at steady state, and how far a quiet
// table's watermark trails the server's WAL position as a consumer reads it.
func (b *bench) tables(ctx context.Context) (*tablesResult, error) {
	const busy = 10
	quiet := b.o.quietTables
	res := &tablesResult{Quiet: quiet, Busy: busy}
	s, err := b.newScenario(ctx, "tables")
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	quietIDs, all, err := s.createQuietBusyTables(ctx, quiet, busy)
	if err != nil {
		return res, err
	}
	p, err := s.startCDC(map[string]string{"CDC_PUBLICATION_POLL_INTERVAL": "1s"})
	if err != nil {
		return res, err
	}
	defer p.stop(time.Minute)
	if err := s.hydrateAll(ctx, p, all, res); err != nil {
		return res, err
	}

	// The busy writer.
	writer, err := startSteadyWriter(ctx, s.db.url, 10*time.Millisecond, func(i int) (string, []any) {
		return fmt.Sprintf("UPDATE public.busy_%02d SET v = v + 1 WHERE id = $1", i%busy), []any{1 + (i/busy)%1000}
	})
	if err != nil {
		return res, err
	}
	defer writer.stop()
	time.Sleep(5 * time.Second) // steady state

	startTxns := writer.txns.Load()
	lags, start, end, err := s.quietLag(ctx, quietIDs)
	if err != nil {
		return res, err
	}
	res.BusyTxns = writer.txns.Load() - startTxns
	if err := writer.stop(); err != nil {
		return res, err
	}
	if err := p.stop(time.Minute); err != nil {
		return res, err
	}
	res.CPUSeconds, res.PeakRSSMiB = p.usage()
	res.WindowSeconds = end.Sub(start).Seconds()
	slices.Sort(lags)
	res.LagSamples = len(lags)
	if len(lags) > 0 {
		res.LagP50Sec, res.LagP99Sec, res.LagMaxSec = lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1]
	}
	own, qr, cp, err := countWatermarkRecords(ctx, b.svc.brokers, s.watermarkTopic(), start, end)
	if err != nil {
		return res, err
	}
	res.OwnPerSec, res.QuietPerSec, res.CheckpointPerSec = float64(own)/res.WindowSeconds, float64(qr)/res.WindowSeconds, float64(cp)/res.WindowSeconds
	b.logf("tables: %.1f table records/s, %.1f quiet records/s, %.1f checkpoints/s; quiet lag p99 %.2fs", res.OwnPerSec, res.QuietPerSec, res.CheckpointPerSec, res.LagP99Sec)
	return res, nil
}

// createQuietBusyTables creates quiet tables of 10 rows and busy ones of 1,000, and a
// publication FOR ALL TABLES; it returns the quiet ones and all.
func (s *scenario) createQuietBusyTables(ctx context.Context, quiet, busy int) (quietIDs, all []change.ExportID, err error) {
	s.b.logf("tables: creating %d quiet and %d busy tables", quiet, busy)
	var ddl []string
	for i := range quiet {
		e := exportID(fmt.Sprintf("public.quiet_%04d", i))
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v int); INSERT INTO %s SELECT g, g FROM generate_series(1, 10) g", pgcat.Table(e), pgcat.Table(e)))
		quietIDs, all = append(quietIDs, e), append(all, e)
	}
	for i := range busy {
		e := exportID(fmt.Sprintf("public.busy_%02d", i))
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v int); INSERT INTO %s SELECT g, 0 FROM generate_series(1, 1000) g", pgcat.Table(e), pgcat.Table(e)))
		all = append(all, e)
	}
	for i := 0; i < len(ddl); i += 100 {
		if err := s.db.exec(ctx, strings.Join(ddl[i:min(i+100, len(ddl))], ";\n")); err != nil {
			return nil, nil, err
		}
	}
	return quietIDs, all, s.db.exec(ctx, "CREATE PUBLICATION "+s.pub+" FOR ALL TABLES")
}

// hydrateAll waits until cdc has hydrated every table and counts the topics it created.
func (s *scenario) hydrateAll(ctx context.Context, p *cdcProc, all []change.ExportID, res *tablesResult) error {
	wt, err := s.b.watchCDC(ctx, p, s.watermarkTopic())
	if err != nil {
		return err
	}
	defer wt.close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	hydratedAt, err := wt.until(wctx, "hydration of every table", allHydrated(0, all...), p.check)
	if err != nil {
		return err
	}
	res.HydrateSeconds = hydratedAt.Sub(p.started).Seconds()
	topics, err := s.b.k.adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	for t := range topics {
		if strings.HasPrefix(t, s.prefix+".") && t != s.watermarkTopic() {
			res.Topics++
		}
	}
	s.b.logf("tables: %d tables hydrated %.1fs after cdc started; %d topics", len(all), res.HydrateSeconds, res.Topics)
	return nil
}

// quietLag samples the quiet tables' lag for -tables-window, one table at a time, as a consumer
// waits for it: the seconds from reading the WAL position until the table's watermark reaches it.
func (s *scenario) quietLag(ctx context.Context, quietIDs []change.ExportID) (lags []float64, start, end time.Time, err error) {
	w, err := wait.New(s.b.svc.brokers, s.watermarkTopic())
	if err != nil {
		return nil, start, end, err
	}
	defer w.Close()
	conn, err := pgx.Connect(ctx, s.db.url)
	if err != nil {
		return nil, start, end, err
	}
	defer conn.Close(context.Background())
	start = time.Now()
	for i := 0; time.Since(start) < s.b.o.tablesWindow; i++ {
		lsn, err := currentLSN(ctx, conn)
		if err != nil {
			return nil, start, end, err
		}
		at := time.Now()
		e := quietIDs[(i*37)%len(quietIDs)]
		uctx, ucancel := context.WithTimeout(ctx, time.Minute)
		_, err = w.Until(uctx, lsn, e)
		ucancel()
		if err != nil {
			return nil, start, end, fmt.Errorf("quiet table %s never reached %s: %w", e, lsn, err)
		}
		lags = append(lags, time.Since(at).Seconds())
		time.Sleep(100 * time.Millisecond)
	}
	return lags, start, time.Now(), nil
}

// countWatermarkRecords reads topic (read-committed) to its end and counts the records produced
// between from and to by kind: tables' own records, quiet records and checkpoints.
func countWatermarkRecords(ctx context.Context, brokers []string, topic string, from, to time.Time) (own, quiet, checkpoints int, err error) {
	err = eachWatermarkRecord(ctx, brokers, topic, func(at time.Time, key string) {
		if at.Before(from) || at.After(to) {
			return
		}
		switch key {
		case watermark.QuietKey:
			quiet++
		case watermark.CheckpointKey:
			checkpoints++
		default:
			own++
		}
	})
	return own, quiet, checkpoints, err
}

// eachWatermarkRecord reads topic (read-committed) to its end and calls fn with each record's
// timestamp and key.
func eachWatermarkRecord(ctx context.Context, brokers []string, topic string, fn func(at time.Time, key string)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	var end int64
	ends.Each(func(o kadm.ListedOffset) { end = o.Offset })
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			return nil // the last records before end were markers
		}
		last := int64(-1)
		fs.EachRecord(func(r *kgo.Record) {
			last = r.Offset
			fn(r.Timestamp, string(r.Key))
		})
		if last+2 >= end { // the last record, or the last before its commit marker
			return nil
		}
	}
}

func printTables(w io.Writer, r *tablesResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nMany tables: %d quiet (10 rows, never written) + %d busy (%.0f transactions/s)\n", r.Quiet, r.Busy, float64(r.BusyTxns)/r.WindowSeconds)
	fmt.Fprintf(w, "   start -> all hydrated %.1fs; %d topics created; cdc CPU %.1fs, peak RSS %.0f MiB\n", r.HydrateSeconds, r.Topics, r.CPUSeconds, r.PeakRSSMiB)
	fmt.Fprintf(w, "   watermark topic at steady state (%.0fs window): %.1f table records/s + %.1f quiet records/s + %.1f checkpoints/s\n",
		r.WindowSeconds, r.OwnPerSec, r.QuietPerSec, r.CheckpointPerSec)
	fmt.Fprintf(w, "   quiet table watermark lag as a consumer reads it (%d samples): p50 %.2fs p99 %.2fs max %.2fs (target p99 <= 2s)\n",
		r.LagSamples, r.LagP50Sec, r.LagP99Sec, r.LagMaxSec)
}
