package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/watermark"
)

// lagSample is one observation of the lag scenario.
type lagSample struct {
	at  time.Time
	wal change.LSN
	wm  map[change.ExportID]change.LSN // latest watermark of each small table
}

// baselineWindow is how long the lag is sampled before the big table is added.
const baselineWindow = 5 * time.Second

func (b *bench) lag(ctx context.Context, mode string, bigRows int64) (*lagResult, error) {
	name := "lag_" + mode
	s, err := b.newScenario(ctx, name)
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	small := []change.ExportID{exportID("public.lag_a"), exportID("public.lag_b")}
	big := exportID("public.lag_big")
	if err := s.createLagTables(ctx, small, big, bigRows); err != nil {
		return nil, err
	}
	res := &lagResult{Mode: mode, BigRows: bigRows}

	p, err := s.startCDC(map[string]string{
		"CDC_TABLES":                    small[0].String() + "," + small[1].String(),
		"CDC_PUBLICATION_POLL_INTERVAL": "1s",
		"CDC_WATERMARK_MODE":            mode,
		"CDC_SNAPSHOT_STRATEGY":         b.o.lagStrategy,
	})
	if err != nil {
		return nil, err
	}
	defer p.stop(time.Minute)
	wt, err := b.watchCDC(ctx, p, s.watermarkTopic())
	if err != nil {
		return nil, err
	}
	defer wt.close()
	wctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	if _, err := wt.until(wctx, "hydration of the small tables", allHydrated(0, small...), p.check); err != nil {
		return nil, err
	}

	load, err := startLagLoad(ctx, s.db.url, wt, small, b.o.lagRate)
	if err != nil {
		return nil, err
	}
	defer load.stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(baselineWindow + 500*time.Millisecond):
	}
	addedAt, copyStart, doneAt, err := s.addAndCopy(wctx, wt, p, big)
	if err != nil {
		return nil, err
	}
	time.Sleep(1500 * time.Millisecond)
	samples, err := load.stop()
	if err != nil {
		return nil, err
	}
	if err := p.stop(time.Minute); err != nil {
		return nil, err
	}
	res.CPUSeconds, res.PeakRSSMiB = p.usage()
	res.WriterTxns = load.writer.txns.Load()
	res.CopySeconds = doneAt.Sub(copyStart).Seconds()
	if res.CopySeconds < 10 {
		b.logf("%s: WARNING: the copy took only %.1fs; raise -lag-rows for a longer window", name, res.CopySeconds)
	}
	summariseLag(res, samples, small, addedAt, copyStart, doneAt)
	b.logf("%s: copy %.1fs, lag p50 %s B p99 %s B max %s B (WAL %.1f KB/s)", name, res.CopySeconds,
		thousands(res.Lag.P50Bytes), thousands(res.Lag.P99Bytes), thousands(res.Lag.MaxBytes), res.WALBytesPerSec/1e3)
	return res, nil
}

// createLagTables creates the small tables (1,000 rows each) and the big one. The big table
// exists before cdc starts, outside the publication: its own generation is not measured.
func (s *scenario) createLagTables(ctx context.Context, small []change.ExportID, big change.ExportID, bigRows int64) error {
	for _, e := range small {
		if err := s.db.exec(ctx,
			fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, n bigint NOT NULL, note text NOT NULL)", pgcat.Table(e)),
			fmt.Sprintf("INSERT INTO %s SELECT g, 0, md5(g::text) FROM generate_series(1, 1000) g", pgcat.Table(e))); err != nil {
			return err
		}
	}
	return s.createBigTable(ctx, big.String(), bigRows)
}

// addAndCopy adds big to the publication and waits until cdc has copied it: when it was added,
// when its copy began (its first hydrating watermark) and when it was hydrated.
func (s *scenario) addAndCopy(ctx context.Context, wt *watcher, p *cdcProc, big change.ExportID) (added, copyStart, done time.Time, err error) {
	added = time.Now()
	s.b.logf("%s: ALTER PUBLICATION %s ADD TABLE %s", s.name, s.pub, big)
	if err := s.db.exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", s.pub, pgcat.Table(big))); err != nil {
		return added, added, added, err
	}
	hydrated := func(m map[change.ExportID]watermark.Record) bool {
		r, ok := m[big]
		return ok && r.State == watermark.StateHydrated
	}
	done, err = wt.until(ctx, "hydration of "+big.String(), hydrated, p.check)
	if err != nil {
		return added, added, done, err
	}
	copyStart, ok := wt.firstSeen(big, watermark.StateHydrating)
	if !ok {
		copyStart = added
	}
	return added, copyStart, done, nil
}

// lagLoad is the lag scenario's steady writer on the small tables and its once-a-second sampler
// of the WAL position and their watermarks.
type lagLoad struct {
	writer  *steadyWriter
	sampler *walSampler[lagSample]
}

// startLagLoad starts the writer, rate transactions a second on the small tables in turn, and
// the sampler.
func startLagLoad(ctx context.Context, dbURL string, wt *watcher, small []change.ExportID, rate int) (*lagLoad, error) {
	sampler, err := startWALSampler(ctx, dbURL, time.Second, func(_ context.Context, _ int, at time.Time, wal change.LSN) lagSample {
		latest := wt.snapshot()
		smp := lagSample{at: at, wal: wal, wm: make(map[change.ExportID]change.LSN)}
		for _, e := range small {
			if r, ok := latest[e]; ok && r.Watermark != nil {
				smp.wm[e] = *r.Watermark
			}
		}
		return smp
	})
	if err != nil {
		return nil, err
	}
	writer, err := startSteadyWriter(ctx, dbURL, time.Second/time.Duration(rate), func(i int) (string, []any) {
		e := small[i%len(small)]
		return fmt.Sprintf("UPDATE %s SET n = n + 1, note = md5(random()::text) WHERE id = $1", pgcat.Table(e)),
			[]any{1 + (i/2)%1000}
	})
	if err != nil {
		_, _ = sampler.stop()
		return nil, err
	}
	return &lagLoad{writer: writer, sampler: sampler}, nil
}

// stop ends the sampler and the writer and returns the samples, or the first error of either.
// A second call returns nothing.
func (l *lagLoad) stop() ([]lagSample, error) {
	samples, serr := l.sampler.stop()
	werr := l.writer.stop()
	if err := errors.Join(werr, serr); err != nil {
		return nil, err
	}
	return samples, nil
}

// summariseLag fills res from the samples: the copy window [from, to] and the baseline window
// before added.
func summariseLag(res *lagResult, samples []lagSample, small []change.ExportID, added, from, to time.Time) {
	var window []lagSample
	for _, s := range samples {
		if !s.at.Before(from) && !s.at.After(to) {
			window = append(window, s)
		}
	}
	if len(window) >= 2 {
		first, last := window[0], window[len(window)-1]
		if d := last.at.Sub(first.at).Seconds(); d > 0 {
			res.WALBytesPerSec = float64(last.wal-first.wal) / d
		}
	}
	lagOf := func(s lagSample, e change.ExportID) (int64, bool) {
		w, ok := s.wm[e]
		if !ok {
			return 0, false
		}
		if w >= s.wal {
			return 0, true
		}
		return int64(s.wal - w), true
	}
	var all, base []int64
	per := make(map[change.ExportID][]int64)
	for _, s := range window {
		for _, e := range small {
			if l, ok := lagOf(s, e); ok {
				all = append(all, l)
				per[e] = append(per[e], l)
			}
		}
	}
	for _, s := range samples {
		if s.at.Before(added) && !s.at.Before(added.Add(-baselineWindow)) {
			for _, e := range small {
				if l, ok := lagOf(s, e); ok {
					base = append(base, l)
				}
			}
		}
	}
	for _, s := range samples {
		pt := lagPoint{Second: s.at.Sub(from).Seconds(), WAL: s.wal.String(), Lag: make(map[string]int64)}
		for _, e := range small {
			if l, ok := lagOf(s, e); ok {
				pt.Lag[e.String()] = l
			}
		}
		res.Timeline = append(res.Timeline, pt)
	}
	res.Samples = len(window)
	res.Lag = newLagStats(all, res.WALBytesPerSec)
	res.Baseline = newLagStats(base, res.WALBytesPerSec)
	res.PerTable = make(map[string]lagStats)
	for e, l := range per {
		res.PerTable[e.String()] = newLagStats(l, res.WALBytesPerSec)
	}
}
