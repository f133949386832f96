package main

import (
	"bytes"
	"io"
	"math"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("parseFlags(%q): %v", tt.args, err)
				}
				if tt.args == nil && (o.rows != 1_000_000 || o.txns != 100_000 || o.workers != 4) {
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
		Stream:   &streamResult{Changes: 40, CDC: newThroughput(40, 400, 2*time.Second, "")},
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
