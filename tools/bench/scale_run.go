package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/watermark"
)

// scaleRun is one cdc process of a scale scenario with its HTTP endpoints (metrics and pprof),
// a watermark watcher, and optionally a steady writer and the sampler.
type scaleRun struct {
	s        *scenario
	p        *cdcProc
	wtMu     sync.Mutex
	wt       *watcher // set once the watermark topic exists
	wtClosed bool
	addr     string
	token    string
	writer   *steadyWriter
	sampler  *walSampler[scaleSample]
	// peakSaved says the sampler saved a heap profile at the peak.
	peakSaved bool
	streamed  []change.ExportID
	heaps     []string
	// marks are the phase boundaries: a name starts a phase ("" ends the last).
	marks []scaleMark
}

type scaleMark struct {
	name    string
	at      time.Time
	metrics scaleCounters
}

// scaleCounters are cdc's cumulative record counters and its Go memory statistics, bytes.
type scaleCounters struct {
	sinkRecords, snapshotRows       float64
	heapInuse, heapReleased, nextGC float64
	heapSys, stackInuse             float64
}

// startScaleRun starts cdc and its watcher. With a phase name, the first phase starts at cdc's
// start (its counters at zero) and the sampler follows tracked (the tables whose lag counts
// once hydrated) and counts the stream changes in the topics of streamed.
func (s *scenario) startScaleRun(ctx context.Context, vars map[string]string, phase string, tracked, streamed []change.ExportID) (*scaleRun, error) {
	ports, err := testsvc.FreePorts(1)
	if err != nil {
		return nil, err
	}
	r := &scaleRun{s: s, addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), token: testsvc.RandomHex(16)}
	env := map[string]string{"CDC_PUBLICATION_POLL_INTERVAL": "1s", "CDC_HTTP_ADDR": r.addr, "CDC_HTTP_TOKEN": r.token, "CDC_HTTP_PPROF": "true"}
	if iv := s.b.o.scaleWMInterval; iv != "" {
		env["CDC_WATERMARK_INTERVAL"] = iv
	}
	for k, v := range vars {
		env[k] = v
	}
	if r.p, err = s.startCDC(env); err != nil {
		return nil, err
	}
	if phase != "" {
		r.marks = append(r.marks, scaleMark{name: phase, at: r.p.started})
		r.streamed = streamed
		if err := r.startSampler(ctx, tracked); err != nil {
			_ = r.p.stop(time.Minute)
			return nil, err
		}
	}
	wt, err := s.b.watchCDC(ctx, r.p, s.watermarkTopic())
	if err != nil {
		r.close()
		return nil, err
	}
	r.wtMu.Lock()
	r.wt = wt
	r.wtMu.Unlock()
	return r, nil
}

// close stops what still runs (errors are the finish's to report).
func (r *scaleRun) close() {
	if r.sampler != nil {
		r.sampler.stop()
	}
	if r.writer != nil {
		_ = r.writer.stop()
	}
	r.closeWatcher()
	_ = r.p.stop(time.Minute)
}

func (r *scaleRun) closeWatcher() {
	if !r.wtClosed && r.wt != nil {
		r.wtClosed = true
		r.wt.close()
	}
}

// startWriter updates row 1 + i%100 of tables in turn, rate transactions a second.
func (r *scaleRun) startWriter(ctx context.Context, tables []change.ExportID, set string, rate int) error {
	key := map[string]string{"public.pgbench_tellers": "tid"}
	w, err := startSteadyWriter(ctx, r.s.db.url, time.Second/time.Duration(rate), func(i int) (string, []any) {
		e := tables[i%len(tables)]
		col := key[e.String()]
		if col == "" {
			col = "id"
		}
		return fmt.Sprintf("UPDATE %s SET %s WHERE %s = $1", pgcat.Table(e), set, col), []any{1 + (i/len(tables))%10}
	})
	r.writer = w
	return err
}

// mark ends the current phase and starts one called name ("" starts none).
func (r *scaleRun) mark(ctx context.Context, name string) error {
	c, err := r.counters(ctx)
	if err != nil {
		return err
	}
	r.marks = append(r.marks, scaleMark{name: name, at: time.Now(), metrics: c})
	return nil
}

// counters scrapes cdc's /metrics.
func (r *scaleRun) counters(ctx context.Context) (scaleCounters, error) {
	var c scaleCounters
	body, err := r.get(ctx, "/metrics", false)
	if err != nil {
		return c, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return c, fmt.Errorf("parse /metrics: %w", err)
	}
	sum := func(name string) float64 {
		var v float64
		if f, ok := families[name]; ok {
			for _, m := range f.GetMetric() {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return v
	}
	c.sinkRecords, c.snapshotRows = sum("tidemark_sink_records_total"), sum("tidemark_snapshot_rows_total")
	c.heapInuse, c.heapReleased, c.nextGC = sum("go_memstats_heap_inuse_bytes"), sum("go_memstats_heap_released_bytes"), sum("go_memstats_next_gc_bytes")
	c.heapSys, c.stackInuse = sum("go_memstats_heap_sys_bytes"), sum("go_memstats_stack_inuse_bytes")
	return c, nil
}

func (r *scaleRun) get(ctx context.Context, path string, admin bool) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+r.addr+path, nil)
	if err != nil {
		return nil, err
	}
	if admin {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, testsvc.Abbreviate(string(body), 200))
	}
	return body, nil
}

// heapProfile saves cdc's heap profile (after a GC) in the work folder; a failure is logged.
func (r *scaleRun) heapProfile(ctx context.Context, tag string) {
	r.saveHeap(ctx, tag, "?gc=1")
	r.heaps = append(r.heaps, filepath.Join(r.s.b.work, fmt.Sprintf("%s-heap-%s.pprof", r.s.name, tag)))
}

// saveHeap writes cdc's heap profile to <scenario>-heap-<tag>.pprof in the work folder.
func (r *scaleRun) saveHeap(ctx context.Context, tag, query string) {
	body, err := r.get(ctx, "/debug/pprof/heap"+query, true)
	if err != nil {
		r.s.b.logf("%s: heap profile %s: %v", r.s.name, tag, err)
		return
	}
	file := filepath.Join(r.s.b.work, fmt.Sprintf("%s-heap-%s.pprof", r.s.name, tag))
	if err := os.WriteFile(file, body, 0o644); err != nil {
		r.s.b.logf("%s: heap profile %s: %v", r.s.name, tag, err)
	}
}

// startSampler starts sampling, every scaleWALEvery, the WAL position, then every scaleEvery
// samples the tracked exports' watermarks as the watcher has them and cdc's VmRSS. Every fifth
// of those also scrapes cdc's Go memory statistics, and when the heap in use is 10% above its
// highest so far (and at least 64 MiB), saves a heap profile (<scenario>-heap-peak.pprof: the
// live heap at the last GC).
func (r *scaleRun) startSampler(ctx context.Context, tracked []change.ExportID) error {
	pid := r.p.cmd.Process.Pid
	var peakHeap float64
	sampler, err := startWALSampler(ctx, r.s.db.url, scaleWALEvery, func(ctx context.Context, n int, at time.Time, wal change.LSN) scaleSample {
		smp := scaleSample{at: at, wal: wal}
		if n%scaleEvery == 0 {
			smp.rssKiB = vmRSS(pid)
			if wt := r.watcher(); wt != nil {
				latest := wt.snapshot()
				smp.wm = make([]change.LSN, len(tracked))
				for i, e := range tracked {
					if rec, ok := latest[e]; ok && rec.Watermark != nil && rec.State == watermark.StateHydrated {
						smp.wm[i] = *rec.Watermark
					}
				}
			}
		}
		if n%(5*scaleEvery) == 0 {
			if c, err := r.counters(ctx); err == nil {
				smp.mem = &c
				if c.heapInuse > 1.1*peakHeap && c.heapInuse > 64<<20 {
					peakHeap = c.heapInuse
					r.saveHeap(ctx, "peak", "")
					r.peakSaved = true
				}
			}
		}
		return smp
	})
	if err != nil {
		return err
	}
	r.sampler = sampler
	return nil
}

// watcher returns the watermark watcher, or nil until the watermark topic exists.
func (r *scaleRun) watcher() *watcher {
	r.wtMu.Lock()
	defer r.wtMu.Unlock()
	return r.wt
}

// copiesAtOnce is the most exports of copied hydrating at the same time, from when the watcher
// first saw each hydrating and hydrated.
func (r *scaleRun) copiesAtOnce(copied []change.ExportID) int {
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for _, e := range copied {
		from, ok1 := r.wt.firstSeen(e, watermark.StateHydrating)
		to, ok2 := r.wt.firstSeen(e, watermark.StateHydrated)
		if ok1 && ok2 {
			edges = append(edges, edge{from, 1}, edge{to, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same time
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.d
		most = max(most, n)
	}
	return most
}

// finish stops the writer, the sampler and cdc, and fills res's phases.
func (r *scaleRun) finish(ctx context.Context, res *scaleResult) error {
	b := r.s.b
	if err := r.writer.stop(); err != nil {
		return err
	}
	samples, err := r.sampler.stop()
	if err != nil {
		return err
	}
	r.closeWatcher()
	if err := r.p.stop(time.Minute); err != nil {
		return err
	}
	res.CPUSeconds, res.PeakRSSMiB = r.p.usage()
	res.HeapProfiles = r.heaps
	if r.peakSaved {
		res.HeapProfiles = append(res.HeapProfiles, filepath.Join(b.work, r.s.name+"-heap-peak.pprof"))
	}
	if len(r.marks) < 2 {
		return nil
	}
	for i, smp := range samples {
		if smp.wm == nil {
			continue
		}
		lags, _ := scaleLags(samples[:i+1], smp.at, smp.at.Add(time.Nanosecond))
		worst := 0.0
		for _, l := range lags {
			worst = max(worst, l)
		}
		res.Timeline = append(res.Timeline, [3]float64{
			math.Round(smp.at.Sub(r.p.started).Seconds()*100) / 100, math.Round(worst*100) / 100, math.Round(float64(smp.rssKiB) / 1024)})
	}
	wms, err := recordTimes(ctx, b.svc.brokers, r.s.watermarkTopic())
	if err != nil {
		return err
	}
	topics := make([]string, len(r.streamed))
	for i, e := range r.streamed {
		topics[i] = r.s.topic(e)
	}
	changes, err := recordTimes(ctx, b.svc.brokers, topics...)
	if err != nil {
		return err
	}
	for i, m := range r.marks[:len(r.marks)-1] {
		next := r.marks[i+1]
		ph := scalePhase{Name: m.name, Seconds: next.at.Sub(m.at).Seconds()}
		if ph.Seconds <= 0 {
			continue
		}
		nWM := countBetween(wms, m.at, next.at)
		snap := next.metrics.snapshotRows - m.metrics.snapshotRows
		stream := countBetween(changes, m.at, next.at)
		ph.SnapshotRowsPerSec, ph.StreamChangesPerSec, ph.WatermarksPerSec = snap/ph.Seconds, float64(stream)/ph.Seconds, float64(nWM)/ph.Seconds
		lags, rss := scaleLags(samples, m.at, next.at)
		slices.Sort(lags)
		slices.Sort(rss)
		ph.LagSamples = len(lags)
		ph.LagP50Sec, ph.LagP99Sec, ph.LagMaxSec = percentile(lags, 50), percentile(lags, 99), percentile(lags, 100)
		ph.RSSMedianMiB, ph.RSSMaxMiB = percentile(rss, 50), percentile(rss, 100)
		for _, smp := range samples {
			if c := smp.mem; c != nil && !smp.at.Before(m.at) && smp.at.Before(next.at) {
				ph.HeapInuseMaxMiB = max(ph.HeapInuseMaxMiB, c.heapInuse/(1<<20))
				ph.HeapHeldMaxMiB = max(ph.HeapHeldMaxMiB, (c.heapSys-c.heapReleased)/(1<<20))
				ph.NextGCMaxMiB = max(ph.NextGCMaxMiB, c.nextGC/(1<<20))
				ph.StackInuseMaxMiB = max(ph.StackInuseMaxMiB, c.stackInuse/(1<<20))
			}
		}
		res.Phases = append(res.Phases, ph)
		b.logf("%s: %s: %.1fs, %.0f snapshot rows/s, %.0f stream changes/s, %.1f watermark records/s; hydrated lag p50 %.2fs p99 %.2fs max %.2fs; RSS max %.0f MiB, heap in use max %.0f MiB, held %.0f MiB, GC goal max %.0f MiB",
			r.s.name, ph.Name, ph.Seconds, ph.SnapshotRowsPerSec, ph.StreamChangesPerSec, ph.WatermarksPerSec, ph.LagP50Sec, ph.LagP99Sec, ph.LagMaxSec, ph.RSSMaxMiB,
			ph.HeapInuseMaxMiB, ph.HeapHeldMaxMiB, ph.NextGCMaxMiB)
	}
	b.logf("%s: cdc CPU %.1fs, peak RSS %.0f MiB (VmHWM); heap profiles %s", r.s.name, res.CPUSeconds, res.PeakRSSMiB, strings.Join(r.heaps, " "))
	return nil
}

type scaleSample struct {
	at     time.Time
	wal    change.LSN
	wm     []change.LSN // per tracked export; 0 when it has none yet
	rssKiB int64
	mem    *scaleCounters // every fifth sample: cdc's /metrics
}

// scaleLags returns the lag in seconds of every tracked export at every sample in [from, to),
// and cdc's RSS in MiB at each: the time since the WAL was last at or below the export's
// watermark (the samples before from count as the WAL's history).
func scaleLags(samples []scaleSample, from, to time.Time) (lags, rss []float64) {
	for i, s := range samples {
		if s.at.Before(from) || !s.at.Before(to) {
			continue
		}
		if s.rssKiB > 0 {
			rss = append(rss, float64(s.rssKiB)/1024)
		}
		if s.wm == nil {
			continue
		}
		for _, w := range s.wm {
			if w == 0 {
				continue // no watermark yet
			}
			// The last sample j <= i whose WAL position is at or below w; the WAL positions
			// only grow.
			j := sort.Search(i+1, func(k int) bool { return samples[k].wal > w }) - 1
			if j < 0 {
				j = 0 // older than the samples: a lower bound
			}
			if w >= s.wal {
				j = i
			}
			lags = append(lags, s.at.Sub(samples[j].at).Seconds())
		}
	}
	return lags, rss
}

// vmRSS returns the VmRSS line of /proc/<pid>/status in KiB, or 0.
func vmRSS(pid int) int64 { return procStatusKiB(pid, "VmRSS:") }

// recordTimes reads topics (read-committed) to their ends and returns the timestamps of their
// records, snapshot rows (op header "r") left out, sorted: done when every partition has reached its end as listed at the start (the
// last record, or the last before its commit marker), or after 10 s without a record.
func recordTimes(ctx context.Context, brokers []string, topics ...string) ([]time.Time, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	type tp struct {
		t string
		p int32
	}
	left := make(map[tp]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[tp{o.Topic, o.Partition}] = o.Offset
		}
	})
	var out []time.Time
	for len(left) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := cl.PollFetches(pctx)
		idle := pctx.Err() != nil
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !isSnapshotRow(r) {
				out = append(out, r.Timestamp)
			}
			k := tp{r.Topic, r.Partition}
			if end, ok := left[k]; ok && r.Offset+2 >= end {
				delete(left, k)
			}
		})
		if idle {
			break // what is left ends with aborted records or markers
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out, nil
}

// isSnapshotRow says whether r's op header is a snapshot row's.
func isSnapshotRow(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == codec.HeaderOp {
			return len(h.Value) == 1 && change.Op(h.Value[0]) == change.OpRead
		}
	}
	return false
}

// countBetween counts the times in [from, to) of sorted ts.
func countBetween(ts []time.Time, from, to time.Time) int {
	i, _ := slices.BinarySearchFunc(ts, from, time.Time.Compare)
	j, _ := slices.BinarySearchFunc(ts, to, time.Time.Compare)
	return j - i
}

func printScale(w io.Writer, r *scaleResult) {
	if r == nil {
		return
	}
	switch r.Scenario {
	case scenarioCopies:
		fmt.Fprintf(w, "\nScale: %d tables, %d of them (%s rows each) added at once and copied (at most %d hydrating together) beside %d busy tables (%d transactions/s)\n",
			r.Tables, r.Copies, thousands(r.CopyRows), r.CopiesAtOnce, 10, r.WriterRate)
	default:
		fmt.Fprintf(w, "\nScale: a %s-row copy beside the catch-up of a %s-transaction pgbench backlog (a writer at %d transactions/s)\n",
			thousands(r.CopyRows), thousands(r.BacklogTxns), r.WriterRate)
	}
	fmt.Fprintf(w, "   cdc CPU %.1fs, peak RSS %.0f MiB (VmHWM; target <= %.0f MiB)\n", r.CPUSeconds, r.PeakRSSMiB, r.TargetRSSMiB)
	fmt.Fprintf(w, "   %-22s %7s %12s %12s %10s %9s %9s %9s %9s %9s %9s\n", "phase", "seconds", "snap rows/s", "changes/s", "wm recs/s",
		"lag p50", "lag p99", "lag max", "RSS max", "heap max", "GC goal")
	for _, p := range r.Phases {
		fmt.Fprintf(w, "   %-22s %7.1f %12.0f %12.0f %10.1f %8.2fs %8.2fs %8.2fs %5.0f MiB %5.0f MiB %5.0f MiB\n", p.Name, p.Seconds, p.SnapshotRowsPerSec,
			p.StreamChangesPerSec, p.WatermarksPerSec, p.LagP50Sec, p.LagP99Sec, p.LagMaxSec, p.RSSMaxMiB, p.HeapInuseMaxMiB, p.NextGCMaxMiB)
	}
	fmt.Fprintf(w, "   lag = how long ago the WAL was last at or below a hydrated table's watermark as a consumer reads it (watermarks sampled every %s, the WAL every %s; target p99 < %.0fs);\n",
		scaleSampleEvery, scaleWALEvery, r.TargetLagSec)
	fmt.Fprintf(w, "   a backlog written before cdc started counts from its start (a lower bound). Stream changes and watermark records: their topics' records by timestamp.\n")
	if len(r.HeapProfiles) > 0 {
		fmt.Fprintf(w, "   heap profiles: %s\n", strings.Join(r.HeapProfiles, " "))
	}
}
