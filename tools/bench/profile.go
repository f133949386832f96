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
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
)

// The CPU split of the catch-up and of the snapshot: more exactly-once cdc runs catch up the
// same backlog (or copy the same table) with pprof on (CDC_HTTP_PPROF, behind a random
// CDC_HTTP_TOKEN), not counted in the figures; the bench takes a CPU profile from cdc's
// "starting replication" line for as long as a measured run took (plus a second), puts each
// sample in one part of the path by the functions on its stack (splitPart), and scales each
// part's share of the samples by the measured runs' CPU seconds per 1,000,000 records. The
// profile is kept in the work folder (go tool pprof reads it).

// Parts of cdc's paths, in the order of the report. A snapshot's read is pgx's COPY receive and
// its decode the COPY rows' parsing (pkg/snapshot).
const (
	partRead    = "read (pgconn socket receive, status updates; COPY receive)"
	partHandOff = "hand-off (channels, scheduler, locks)"
	partDecode  = "decode (pgoutput parse and routing; COPY rows, pkg/snapshot)"
	partEncode  = "encode (pkg/codec)"
	partProduce = "produce (franz-go, pkg/sink)"
	partGC      = "GC (mark, sweep, assists, write barriers)"
	partOther   = "other (pipeline, watermarks, logs, runtime)"
)

var splitParts = []string{partRead, partHandOff, partDecode, partEncode, partProduce, partGC, partOther}

// cpuSplit is cdc's CPU by part, per 1,000,000 records of Unit.
type cpuSplit struct {
	// Unit is what the records are ("changes" of a catch-up, "rows" of a snapshot); Runs what
	// the profiled runs were ("catch-ups", "copies").
	Unit        string `json:"unit"`
	Runs        string `json:"runs"`
	ProfileFile string `json:"profile_file"`
	// Profiles is how many profiled runs were merged.
	Profiles int `json:"profiles"`
	// ProfileSeconds is the profile's window; ProfileCPUSeconds the CPU its samples cover.
	ProfileSeconds    float64 `json:"profile_seconds"`
	ProfileCPUSeconds float64 `json:"profile_cpu_seconds"`
	Samples           int64   `json:"samples"`
	// CPUPerMillion is the measured runs' cdc CPU seconds per 1,000,000 records, the scale.
	CPUPerMillion float64     `json:"cdc_cpu_seconds_per_million"`
	Parts         []splitPart `json:"parts"`
}

// splitPart is one part's share of the samples and its CPU seconds per 1,000,000 records.
type splitPart struct {
	Name       string  `json:"name"`
	Share      float64 `json:"share"`
	PerMillion float64 `json:"cpu_seconds_per_million"`
}

// gcFuncs and handOffFuncs are the runtime's functions (after "runtime.", by prefix) that make
// a sample GC or hand-off: the collector's own work, and the scheduler's and channels'.
var (
	gcFuncs = []string{"gc", "markroot", "scanobject", "scanblock", "scanstack", "scanframe", "greyobject",
		"bgsweep", "sweepone", "(*sweepLocked)", "(*mspan).sweep", "wbBuf", "bgscavenge", "(*gcWork)",
		"(*gcBits)", "tryDeferToSpanScan", "scanSpan", "(*mheap).reclaim", "bulkBarrier", "(*gcControllerState)",
		"(*spanInlineMarkBits)", "(*scavengerState)", "markBits", "(*markBits)", "findObject", "spanOf", "heapBitsSetType", "wbMove"}
	handOffFuncs = []string{"chansend", "chanrecv", "selectgo", "selectnb", "gopark", "goready", "ready",
		"schedule", "findRunnable", "park_m", "mcall", "wakep", "startm", "stopm", "mPark", "notesleep", "notetsleep",
		"notewakeup", "netpoll", "execute", "goexit", "newproc", "runqget", "runqgrab", "runqsteal", "runqput",
		"globrunq", "stealWork", "gosched", "goschedImpl", "resetspinning", "semacquire", "semrelease", "handoffp",
		"lock2", "unlock2", "lockWithRank", "unlockWithRank", "casgstatus", "send", "recv", "closechan", "(*waitq)",
		"checkTimers", "(*timers)", "acquirep", "releasep"}
)

// partOf says which part a function belongs to, or "" when it does not decide (the standard
// library and the runtime's allocator count for their caller).
func partOf(fn string) string {
	if rt, ok := strings.CutPrefix(fn, "runtime."); ok {
		for _, p := range gcFuncs {
			if strings.HasPrefix(rt, p) {
				return partGC
			}
		}
		for _, p := range handOffFuncs {
			if strings.HasPrefix(rt, p) {
				return partHandOff
			}
		}
		return ""
	}
	switch {
	case strings.HasPrefix(fn, "sync.(*Mutex)"), strings.HasPrefix(fn, "sync.(*RWMutex)"), strings.HasPrefix(fn, "sync.(*Cond)"),
		strings.HasPrefix(fn, "internal/sync."), strings.HasPrefix(fn, "sync.(*WaitGroup)"):
		return partHandOff
	case strings.HasPrefix(fn, "github.com/jackc/pgx/v5/"),
		strings.HasPrefix(fn, "github.com/tidemark/cdc/pkg/replication.(*Stage).receive"),
		strings.HasPrefix(fn, "github.com/tidemark/cdc/pkg/replication.(*Stage).sendStatus"),
		strings.HasPrefix(fn, "github.com/tidemark/cdc/pkg/replication.(*Stage).statusLoop"),
		strings.HasPrefix(fn, "github.com/jackc/pglogrepl.SendStandbyStatusUpdate"):
		return partRead
	case strings.HasPrefix(fn, "github.com/tidemark/cdc/pkg/codec."):
		return partEncode
	case strings.HasPrefix(fn, "github.com/tidemark/cdc/pkg/replication."), strings.HasPrefix(fn, "github.com/jackc/pglogrepl."),
		strings.HasPrefix(fn, "github.com/tidemark/cdc/pkg/snapshot."):
		return partDecode
	case strings.HasPrefix(fn, "github.com/twmb/franz-go/"), strings.HasPrefix(fn, "github.com/tidemark/cdc/pkg/sink."):
		return partProduce
	}
	return ""
}

// samplePart is the part of one sample: the first deciding function from the leaf up (inlined
// frames included, innermost first); other when none decides.
func samplePart(s *profile.Sample) string {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			if p := partOf(line.Function.Name); p != "" {
				return p
			}
		}
	}
	return partOther
}

// splitProfile buckets a CPU profile's samples by part and scales each share by perMillion,
// the measured CPU seconds per 1,000,000 records.
func splitProfile(p *profile.Profile, perMillion float64) (*cpuSplit, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("not a CPU profile (sample types %v)", p.SampleType)
	}
	by := make(map[string]int64)
	var total int64
	sp := &cpuSplit{CPUPerMillion: perMillion, ProfileSeconds: float64(p.DurationNanos) / 1e9}
	for _, s := range p.Sample {
		v := s.Value[idx]
		by[samplePart(s)] += v
		total += v
		sp.Samples += s.Value[0]
	}
	if total == 0 {
		return nil, fmt.Errorf("the profile holds no samples")
	}
	sp.ProfileCPUSeconds = float64(total) / 1e9
	for _, name := range splitParts {
		share := float64(by[name]) / float64(total)
		sp.Parts = append(sp.Parts, splitPart{Name: name, Share: share, PerMillion: share * perMillion})
	}
	return sp, nil
}

// print writes the split as a table, beside the CPU of what cdc is compared with (the
// walsender, or PostgreSQL + the broker) when known, and cdc's target, target × that.
func (sp *cpuSplit) print(w io.Writer, label string, l *serversLimit, target float64) {
	if sp == nil {
		return
	}
	fmt.Fprintf(w, "   %s CPU per 1,000,000 %s by part (CPU profiles of %d more %s: %d samples, %.1fs of CPU in %.1fs; shares scaled to the measured %.2fs per 1,000,000; %s):\n",
		label, sp.Unit, sp.Profiles, sp.Runs, sp.Samples, sp.ProfileCPUSeconds, sp.ProfileSeconds, sp.CPUPerMillion, sp.ProfileFile)
	for _, p := range sp.Parts {
		fmt.Fprintf(w, "     %-64s %6.2fs %5.1f%%\n", p.Name, p.PerMillion, 100*p.Share)
	}
	if l != nil && l.CDCOverVersus > 0 {
		versus := l.CDCCPUPerMillion / l.CDCOverVersus
		fmt.Fprintf(w, "     %-64s %6.2fs (target: cdc <= %.2g × = %.2fs)\n", l.Versus+", for comparison", versus, target, target*versus)
	}
}

// profiler takes one CPU profile of a cdc run through its pprof endpoint.
type profiler struct {
	addr, token string
	seconds     int
	file        string // where the profile is written
	done        chan struct{}
	prof        *profile.Profile
	err         error
}

// newProfiler picks a free port for cdc's HTTP endpoints and a token.
func newProfiler(seconds int, file string) (*profiler, error) {
	ports, err := testsvc.FreePorts(1)
	if err != nil {
		return nil, err
	}
	return &profiler{addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), token: testsvc.RandomHex(16),
		seconds: min(max(seconds, 1), 120), file: file, done: make(chan struct{})}, nil
}

// start waits for cdc's "starting replication" line, then takes the profile; wait returns it.
func (pr *profiler) start(ctx context.Context, p *cdcProc) {
	go func() {
		defer close(pr.done)
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if _, ok := p.logTime("starting replication"); ok {
				break
			}
			if time.Now().After(deadline) || p.check() != nil {
				pr.err = fmt.Errorf("no \"starting replication\" line in %s", p.logPath)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		pr.prof, pr.err = pr.fetch(ctx)
	}()
}

func (pr *profiler) fetch(ctx context.Context) (*profile.Profile, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Duration(pr.seconds+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pr.addr, pr.seconds), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+pr.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cpu profile: %s: %s", resp.Status, testsvc.Abbreviate(string(body), 200))
	}
	if err := os.WriteFile(pr.file, body, 0o644); err != nil {
		return nil, fmt.Errorf("write profile: %w", err)
	}
	p, err := profile.Parse(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse profile: %w", err)
	}
	return p, nil
}

// save writes cdc's pprof profile name (heap, allocs, goroutine...) to file.
func (pr *profiler) save(ctx context.Context, name, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/%s", pr.addr, name), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+pr.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s profile: %w", name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s profile: %w", name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s profile: %s", name, resp.Status)
	}
	return os.WriteFile(file, body, 0o644)
}

// wait returns the profile once taken.
func (pr *profiler) wait(ctx context.Context) (*profile.Profile, error) {
	select {
	case <-pr.done:
		return pr.prof, pr.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// vars are cdc's settings for the profiled run: HTTP endpoints with pprof behind the token.
func (pr *profiler) vars() map[string]string {
	return map[string]string{"CDC_HTTP_ADDR": pr.addr, "CDC_HTTP_TOKEN": pr.token, "CDC_HTTP_PPROF": "true"}
}

// profileCatchUp has each lane of lanes catch up the backlog once more with a CPU profile,
// merges the profiles and stores the split in res (exactly-once): the shares of the samples,
// scaled by the measured runs' CPU per 1,000,000 changes.
func (s *scenario) profileCatchUp(ctx context.Context, res *streamResult, lanes []*lane, target change.LSN) error {
	if len(lanes) == 0 {
		return nil
	}
	if res.CDC.Count <= 0 || res.CPUSeconds <= 0 || res.DeliveryRounds < 1 {
		return fmt.Errorf("no measured exactly-once catch-up to scale by")
	}
	seconds := int(math.Ceil(res.CDCAfterStartup.Seconds/float64(res.DeliveryRounds))) + 1
	split, err := s.b.profileRuns(len(lanes), seconds, "stream", "stream-catchup-cpu", "changes", "catch-ups",
		res.CPUSeconds/float64(res.CDC.Count)*1e6, func(i int, pr *profiler) (float64, float64, error) {
			lanes[i].prof = pr
			run, _, err := lanes[i].catchUp(ctx, target, res.Changes)
			return run.CDC.PerSecond, run.CPUSeconds, err
		})
	res.Split = split
	return err
}

// profileRuns runs n more cdc runs, each with a CPU profile of seconds (run(i, pr) runs the
// i-th with pr's settings and returns its records/s and cdc CPU seconds), merges the profiles
// into <stem>.pprof in the work folder and splits the samples by part, scaled to perMillion
// CPU seconds per 1,000,000 records of unit. what prefixes the log lines; runs names them.
func (b *bench) profileRuns(n, seconds int, what, stem, unit, runs string, perMillion float64, run func(i int, pr *profiler) (float64, float64, error)) (*cpuSplit, error) {
	var profs []*profile.Profile
	for i := range n {
		pr, err := newProfiler(seconds, filepath.Join(b.work, fmt.Sprintf("%s-%d.pprof", stem, i)))
		if err != nil {
			return nil, err
		}
		b.logf("%s: CPU split: run %d of %d with a %ds CPU profile (not counted in the figures)", what, i+1, n, pr.seconds)
		rate, cpu, err := run(i, pr)
		if err != nil {
			return nil, err
		}
		b.logf("%s: CPU split: profiled run %.0f %s/s, cdc %.2fs CPU; profile %s", what, rate, unit, cpu, pr.file)
		profs = append(profs, pr.prof)
	}
	merged, err := profile.Merge(profs)
	if err != nil {
		return nil, fmt.Errorf("merge profiles: %w", err)
	}
	file := filepath.Join(b.work, stem+".pprof")
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := merged.Write(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	split, err := splitProfile(merged, perMillion)
	if err != nil {
		return nil, err
	}
	split.ProfileFile, split.Profiles, split.Unit, split.Runs = file, len(profs), unit, runs
	return split, nil
}

// profileCopies has cdc copy the snapshot table -profile-rounds more times with the chunked
// strategy and a CPU profile each, merges the profiles and stores the split in res: the shares
// of the samples, scaled by the measured chunked copies' CPU per 1,000,000 rows.
func (s *scenario) profileCopies(ctx context.Context, e change.ExportID, res *snapshotResult) error {
	n := s.b.o.profileRounds
	if n < 1 {
		return nil
	}
	run := res.snapshotRun
	if run.CDC.Count <= 0 || run.CPUSeconds <= 0 || res.StrategyRounds < 1 {
		return fmt.Errorf("no measured chunked copy to scale by")
	}
	seconds := int(math.Ceil(run.CDCFromStart.Seconds/float64(res.StrategyRounds))) + 1
	split, err := s.b.profileRuns(n, seconds, "snapshot", "snapshot-copy-cpu", "rows", "chunked copies",
		run.CPUSeconds/float64(run.CDC.Count)*1e6, func(i int, pr *profiler) (float64, float64, error) {
			r, _, _, err := s.copyTable(ctx, e, res.Rows, strategyChunked, fmt.Sprintf("prof%d", i), nil, pr)
			return r.CDC.PerSecond, r.CPUSeconds, err
		})
	res.Split = split
	return err
}
