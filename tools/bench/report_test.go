package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		name   string
		sorted []int64
		p      float64
		want   int64
	}{
		{name: "empty", sorted: nil, p: 50, want: 0},
		{name: "one", sorted: []int64{7}, p: 99, want: 7},
		{name: "median of odd", sorted: []int64{1, 2, 3, 4, 5}, p: 50, want: 3},
		{name: "median of even is the lower", sorted: []int64{1, 2, 3, 4}, p: 50, want: 2},
		{name: "p99 of 100 is the 99th", sorted: seq(100), p: 99, want: 99},
		{name: "p99 of 10 is the max", sorted: seq(10), p: 99, want: 10},
		{name: "p100", sorted: seq(10), p: 100, want: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %d, want %d", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func seq(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = int64(i + 1)
	}
	return s
}

func TestRatio(t *testing.T) {
	tests := []struct {
		name             string
		cdc, read, write float64
		want             float64
	}{
		{name: "write is the limit", cdc: 50, read: 200, write: 100, want: 0.5},
		{name: "read is the limit", cdc: 50, read: 100, write: 400, want: 0.5},
		{name: "faster than a limit", cdc: 300, read: 1000, write: 200, want: 1.5},
		{name: "missing limit", cdc: 50, read: 0, write: 100, want: 0},
		{name: "missing cdc", cdc: 0, read: 10, write: 100, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratio(tt.cdc, tt.read, tt.write); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("ratio = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOver(t *testing.T) {
	tests := []struct {
		name string
		a, b float64
		want float64
	}{
		{name: "slower", a: 80, b: 100, want: 0.8},
		{name: "faster", a: 150, b: 100, want: 1.5},
		{name: "missing numerator", a: 0, b: 100, want: 0},
		{name: "missing denominator", a: 80, b: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := over(tt.a, tt.b); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("over(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestNewThroughput(t *testing.T) {
	tp := newThroughput(1000, 2_000_000, 2*time.Second, "")
	if tp.PerSecond != 500 || tp.MBPerSecond != 1 || tp.Seconds != 2 {
		t.Errorf("newThroughput = %+v, want 500/s and 1 MB/s over 2s", tp)
	}
	if z := newThroughput(10, 10, 0, ""); z.PerSecond != 0 || z.MBPerSecond != 0 {
		t.Errorf("zero duration gives rates %+v, want 0", z)
	}
}

func TestSummariseLag(t *testing.T) {
	a, b := change.ExportID{Schema: "public", Table: "a"}, change.ExportID{Schema: "public", Table: "b"}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// WAL grows 1000 bytes/s. Before the add (s < 10) both tables lag 100 bytes; during the
	// copy (s = 10..20) a lags 500 and b stalls at the WAL position of s = 10.
	var samples []lagSample
	for s := 5; s <= 22; s++ {
		wal := change.LSN(1_000_000 + 1000*s)
		smp := lagSample{at: at(s), wal: wal, wm: map[change.ExportID]change.LSN{}}
		if s < 10 {
			smp.wm[a], smp.wm[b] = wal-100, wal-100
		} else {
			smp.wm[a], smp.wm[b] = wal-500, 1_000_000+10_000
		}
		samples = append(samples, smp)
	}
	var res lagResult
	summariseLag(&res, samples, []change.ExportID{a, b}, at(10), at(10), at(20))
	if res.Samples != 11 {
		t.Errorf("samples in the window = %d, want 11", res.Samples)
	}
	if math.Abs(res.WALBytesPerSec-1000) > 1e-9 {
		t.Errorf("WAL rate = %v, want 1000", res.WALBytesPerSec)
	}
	if got := res.PerTable["public.a"]; got.MaxBytes != 500 || got.P50Bytes != 500 {
		t.Errorf("a: %+v, want a constant 500", got)
	}
	if got := res.PerTable["public.b"]; got.MaxBytes != 10_000 || got.P50Bytes != 5000 {
		t.Errorf("b: %+v, want 0..10000 with median 5000", got)
	}
	if res.Lag.MaxBytes != 10_000 || res.Lag.MaxWALSec != 10 {
		t.Errorf("overall max = %d B / %vs, want 10000 B / 10s", res.Lag.MaxBytes, res.Lag.MaxWALSec)
	}
	if res.Baseline.Samples != 10 || res.Baseline.MaxBytes != 100 {
		t.Errorf("baseline = %+v, want 10 samples of 100 B", res.Baseline)
	}
}

func TestPgbenchProcessed(t *testing.T) {
	out := "transaction type: <builtin: TPC-B (sort of)>\nnumber of clients: 4\n" +
		"number of transactions per client: 500\nnumber of transactions actually processed: 2000/2000\n" +
		"number of failed transactions: 0 (0.000%)\n"
	n, err := pgbenchProcessed(out)
	if err != nil || n != 2000 {
		t.Errorf("pgbenchProcessed = %d, %v; want 2000", n, err)
	}
	if _, err := pgbenchProcessed("pgbench: error: connection refused"); err == nil {
		t.Error("pgbenchProcessed of an error report: want an error")
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults", args: nil},
		{name: "only stream", args: []string{"-only", "stream", "-txns", "10"}},
		{name: "bad scenario", args: []string{"-only", "all"}, wantErr: "-only"},
		{name: "every problem at once", args: []string{"-rows", "0", "-workers", "99"}, wantErr: "-workers 99"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "one snapshot round", args: []string{"-only", "snapshot", "-snapshot-rounds", "1"}},
		{name: "no snapshot round", args: []string{"-snapshot-rounds", "0"}, wantErr: "-snapshot-rounds 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("parseFlags(%q): %v", tt.args, err)
				}
				if tt.args == nil && (o.rows != 1_000_000 || o.txns != 100_000 || o.workers != 4 || o.snapshotRounds != 2) {
					t.Errorf("defaults = %+v", o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("parseFlags(%q) = %v, want an error mentioning %q", tt.args, err, tt.wantErr)
			}
		})
	}
	if _, err := parseFlags([]string{"-rows", "0", "-workers", "99"}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "-rows 0") {
		t.Errorf("want both problems reported, got %v", err)
	}
}

func TestPrintShowsEveryScenario(t *testing.T) {
	r := &results{
		Host:     map[string]string{"cpus": "2", "go": "go1.26"},
		Snapshot: &snapshotResult{Table: "public.t", Rows: 10, Read: newThroughput(10, 100, time.Second, "")},
		Stream:   &streamResult{Changes: 40, catchUp: catchUp{Delivery: "exactly-once", CDC: newThroughput(40, 400, 2*time.Second, "")}},
		Lag: map[string]lagResult{
			"independent": {Mode: "independent", CopySeconds: 12, Lag: lagStats{P99Bytes: 1234, P99WALSec: 0.5}},
			"global":      {Mode: "global", CopySeconds: 13, Lag: lagStats{P99Bytes: 99999, P99WALSec: 12}},
		},
		Errors: []string{"lag global: boom"},
	}
	var out bytes.Buffer
	r.print(&out)
	for _, want := range []string{"1. Snapshot", "2. Streaming", "3. Watermark lag", "independent", "global",
		"1,234 B = 0.50s", "99,999 B = 12.00s", "ERROR: lag global: boom", "READ  limit"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestPrintStreamDeliveryModes(t *testing.T) {
	eos := catchUp{Delivery: "exactly-once", CDC: newThroughput(40_000, 4e6, 4*time.Second, ""),
		CDCAfterStartup: newThroughput(40_000, 4e6, 3*time.Second, ""), CDCRecords: 40_000, CDCTxns: 20, CDCPerTxn: 2000, Ratio: 0.4}
	alo := catchUp{Delivery: "at-least-once", CDC: newThroughput(40_000, 4e6, 2*time.Second, ""),
		CDCAfterStartup: newThroughput(40_000, 4e6, 1500*time.Millisecond, ""), CDCRecords: 40_000, Ratio: 0.8}
	tests := []struct {
		name     string
		alo      *catchUp
		want     []string
		dontWant []string
	}{
		{
			name: "both modes",
			alo:  &alo,
			want: []string{
				"cdc exactly-once (process start -> caught up)", "cdc at-least-once (process start -> caught up)",
				"cdc at-least-once (replication start -> caught up)",
				"ratio cdc exactly-once / min(read, write) = 0.40", "ratio cdc at-least-once / min(read, write) = 0.80",
				"ratio exactly-once / at-least-once = 0.50   (from replication start: 0.50",
				"20 Kafka transactions, 2000 records/txn", "40,000 records (no Kafka transactions)",
			},
		},
		{
			name:     "at-least-once run missing",
			want:     []string{"cdc exactly-once (process start -> caught up)"},
			dontWant: []string{"at-least-once"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &streamResult{Changes: 40_000, catchUp: eos, AtLeastOnce: tt.alo}
			if tt.alo != nil {
				s.RatioDelivery = over(s.CDC.PerSecond, tt.alo.CDC.PerSecond)
				s.RatioDeliveryAfterStartup = over(s.CDCAfterStartup.PerSecond, tt.alo.CDCAfterStartup.PerSecond)
			}
			var out bytes.Buffer
			(&results{Host: map[string]string{}, Stream: s}).print(&out)
			for _, want := range tt.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			for _, no := range tt.dontWant {
				if strings.Contains(out.String(), no) {
					t.Errorf("output has %q:\n%s", no, out.String())
				}
			}
		})
	}
}

// TestStreamJSON checks that the exactly-once run keeps its top-level keys and that the
// at-least-once run and the ratio between them are in the file.
func TestStreamJSON(t *testing.T) {
	s := &streamResult{
		catchUp:       catchUp{Delivery: "exactly-once", CDC: newThroughput(100, 1000, time.Second, ""), Ratio: 0.5},
		AtLeastOnce:   &catchUp{Delivery: "at-least-once", CDC: newThroughput(125, 1000, time.Second, "")},
		RatioDelivery: 0.8,
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := (&results{Stream: s}).writeJSON(path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Stream map[string]json.RawMessage `json:"stream"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"delivery":                            `"exactly-once"`,
		"ratio_cdc_to_min_limit":              `0.5`,
		"ratio_exactly_once_to_at_least_once": `0.8`,
	} {
		if string(got.Stream[key]) != want {
			t.Errorf("stream.%s = %s, want %s", key, got.Stream[key], want)
		}
	}
	var alo catchUp
	if err := json.Unmarshal(got.Stream["at_least_once"], &alo); err != nil {
		t.Fatalf("stream.at_least_once: %v", err)
	}
	if alo.Delivery != "at-least-once" || alo.CDC.PerSecond != 125 {
		t.Errorf("stream.at_least_once = %+v, want at-least-once at 125/s", alo)
	}
	if _, ok := got.Stream["cdc"]; !ok {
		t.Errorf("stream lacks the exactly-once run's cdc key: %s", raw)
	}
}

func TestStrategyOrder(t *testing.T) {
	for rounds, want := range map[int]string{
		1: "chunked copy",
		2: "chunked copy copy chunked",
		3: "chunked copy copy chunked chunked copy",
	} {
		if got := strings.Join(strategyOrder(rounds), " "); got != want {
			t.Errorf("strategyOrder(%d) = %q, want %q", rounds, got, want)
		}
	}
}

func TestCombineSnapshotRuns(t *testing.T) {
	runs := []snapshotRun{
		{Strategy: "copy", CDC: newThroughput(1000, 10_000, time.Second, ""), CDCFromStart: newThroughput(1000, 10_000, 2*time.Second, ""),
			CDCCopied: newThroughput(1000, 10_000, time.Second, ""), CDCTxns: 4},
		{Strategy: "copy", CDC: newThroughput(1000, 10_000, 3*time.Second, ""), CDCFromStart: newThroughput(1000, 10_000, 4*time.Second, ""),
			CDCTxns: 6},
	}
	c := combineSnapshotRuns(runs)
	if c.Strategy != "copy" || c.CDC.Count != 2000 || c.CDC.Bytes != 20_000 || math.Abs(c.CDC.PerSecond-500) > 1e-9 {
		t.Errorf("combined CDC = %+v (%s), want 2,000 rows at 500/s", c.CDC, c.Strategy)
	}
	if math.Abs(c.CDCFromStart.PerSecond-2000.0/6) > 1e-9 {
		t.Errorf("combined from start = %v/s, want 2000/6", c.CDCFromStart.PerSecond)
	}
	if c.CDCCopied.Seconds != 0 {
		t.Errorf("copy durable is missing from a run, want it missing from the total: %+v", c.CDCCopied)
	}
	if c.CDCTxns != 10 || c.CDCPerTxn != 200 {
		t.Errorf("transactions = %d (%v records/txn), want 10 (200)", c.CDCTxns, c.CDCPerTxn)
	}
	if z := combineSnapshotRuns(nil); z.CDC.Seconds != 0 {
		t.Errorf("no runs = %+v, want zero", z)
	}
}

// snapshotRunAt is a run of strategy: 1,000,000 rows in secs seconds from snapshot start, one
// more second from process start.
func snapshotRunAt(strategy string, secs float64) snapshotRun {
	d := time.Duration(secs * float64(time.Second))
	return snapshotRun{Strategy: strategy, CDC: newThroughput(1_000_000, 400e6, d, ""),
		CDCFromStart: newThroughput(1_000_000, 400e6, d+time.Second, ""), CDCCopied: newThroughput(1_000_000, 400e6, d, ""),
		CDCTxns: 100, CDCPerTxn: 10_000}
}

func TestSnapshotStrategies(t *testing.T) {
	r := &snapshotResult{Table: "public.t", Rows: 1_000_000, Delivery: "exactly-once",
		Read:        newThroughput(1_000_000, 100e6, time.Second, ""),
		writeLimits: writeLimits{Write: newThroughput(1_000_000, 400e6, 2*time.Second, "")}}
	// Round 1: chunked 5s, copy 4s; round 2 (copy first): copy 4s, chunked 3s.
	r.setRuns([]snapshotRun{snapshotRunAt("chunked", 5), snapshotRunAt("chunked", 3)},
		[]snapshotRun{snapshotRunAt("copy", 4), snapshotRunAt("copy", 4)}, 2)
	if r.Copy == nil || r.Strategy != "chunked" || r.Copy.Strategy != "copy" {
		t.Fatalf("runs = %+v / %+v, want chunked at the top level and copy in Copy", r.snapshotRun, r.Copy)
	}
	if math.Abs(r.RatioStrategy-1) > 1e-9 {
		t.Errorf("chunked/copy = %v, want 1 (8s each in total)", r.RatioStrategy)
	}
	if math.Abs(r.RatioStrategyFromProc-1) > 1e-9 {
		t.Errorf("chunked/copy from process start = %v, want 1", r.RatioStrategyFromProc)
	}
	if len(r.StrategyRatios) != 2 || math.Abs(r.StrategyRatios[0]-0.8) > 1e-9 || math.Abs(r.StrategyRatios[1]-4.0/3) > 1e-9 {
		t.Errorf("per round = %v, want [0.8 1.33]", r.StrategyRatios)
	}
	// 250,000 rows/s over the lower limit, the WRITE limit's 500,000.
	if math.Abs(r.Ratio-0.5) > 1e-9 || math.Abs(r.Copy.Ratio-0.5) > 1e-9 {
		t.Errorf("ratios to the limits = %v and %v, want 0.5", r.Ratio, r.Copy.Ratio)
	}

	var out bytes.Buffer
	(&results{Host: map[string]string{}, Snapshot: r}).print(&out)
	for _, want := range []string{
		"READ  limit (parallel text COPY, discarded)", "WRITE limit (franz-go, sink settings)",
		"cdc chunked (snapshot start -> hydrated)", "cdc chunked (snapshot start -> copy durable)",
		"cdc chunked (process start -> hydrated)", "cdc copy (snapshot start -> hydrated)",
		"cdc copy (process start -> hydrated)",
		"cdc chunked wrote 2,000,000 records in 200 Kafka transactions (10000 records/txn)",
		"ratio cdc chunked / min(read, write) = 0.50   (from process start: 0.40)",
		"ratio cdc copy / min(read, write) = 0.50",
		"snapshot chunked/copy: 1.00 (target >= 0.8); from process start: 1.00",
		"each strategy copied the table 2 times, in the order chunked, copy, copy, chunked",
		"chunked/copy per round: 0.80, 1.33",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Both strategies' rows sit in the one table, with the same columns.
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "(snapshot start -> hydrated)") && !strings.Contains(line, "250,000") {
			t.Errorf("row %q: want 250,000 rows/s", line)
		}
	}

	// Without the copy run there is no chunked/copy line.
	r.Copy, r.StrategyRounds, r.StrategyRatios = nil, 1, nil
	out.Reset()
	(&results{Host: map[string]string{}, Snapshot: r}).print(&out)
	if strings.Contains(out.String(), "chunked/copy") || strings.Contains(out.String(), "cdc copy") {
		t.Errorf("output without a copy run mentions it:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "cdc chunked (snapshot start -> hydrated)") {
		t.Errorf("output lacks the chunked run:\n%s", out.String())
	}
}

// TestSnapshotJSON checks that the chunked runs keep the snapshot's top-level keys and that the
// copy runs and the ratio between them are in the file.
func TestSnapshotJSON(t *testing.T) {
	r := &snapshotResult{Table: "public.t", Read: newThroughput(100, 1000, time.Second, ""),
		writeLimits: writeLimits{Write: newThroughput(100, 1000, time.Second, "")}}
	r.setRuns([]snapshotRun{snapshotRunAt("chunked", 4)}, []snapshotRun{snapshotRunAt("copy", 5)}, 1)
	path := filepath.Join(t.TempDir(), "results.json")
	if err := (&results{Snapshot: r}).writeJSON(path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Snapshot map[string]json.RawMessage `json:"snapshot"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"strategy":              `"chunked"`,
		"ratio_chunked_to_copy": `1.25`,
		"strategy_rounds":       `1`,
	} {
		if string(got.Snapshot[key]) != want {
			t.Errorf("snapshot.%s = %s, want %s", key, got.Snapshot[key], want)
		}
	}
	for _, key := range []string{"cdc", "cdc_from_process_start", "cdc_copy_durable", "ratio_cdc_to_min_limit", "write", "write_ceiling_best"} {
		if _, ok := got.Snapshot[key]; !ok {
			t.Errorf("snapshot lacks the chunked run's %s key: %s", key, raw)
		}
	}
	var cp snapshotRun
	if err := json.Unmarshal(got.Snapshot["copy"], &cp); err != nil {
		t.Fatalf("snapshot.copy: %v", err)
	}
	if cp.Strategy != "copy" || cp.CDC.PerSecond != 200_000 {
		t.Errorf("snapshot.copy = %+v, want copy at 200,000/s", cp)
	}
}

func TestPrintHostSteal(t *testing.T) {
	var out bytes.Buffer
	(&results{Host: map[string]string{}, HostSteal: map[string]float64{"stream": 4.2, "snapshot": 1.5, "run": 3.1}}).print(&out)
	if want := "snapshot 1.5%, stream 4.2%; whole run 3.1%"; !strings.Contains(out.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	(&results{Host: map[string]string{}}).print(&out)
	if strings.Contains(out.String(), "steal") {
		t.Errorf("a run without steal figures prints a steal line:\n%s", out.String())
	}
}
