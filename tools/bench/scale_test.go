package main

import (
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

func TestScaleLags(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []scaleSample{
		{at: at(0), wal: 100},
		{at: at(50), wal: 200},
		{at: at(100), wal: 300, wm: []change.LSN{100, 300, 0}, rssKiB: 2048},
		{at: at(150), wal: 300},
		{at: at(200), wal: 400, wm: []change.LSN{250, 50, 400}, rssKiB: 4096},
	}
	lags, rss := scaleLags(samples, at(100), at(300))
	// At 100 ms: table 0 was last covered when the WAL was at 100 (0 ms): 100 ms; table 1 is at
	// the WAL: 0; table 2 has no watermark. At 200 ms: table 0 at 250: the WAL was last at or
	// below it at 50 ms: 150 ms; table 1 at 50 is older than every sample: counts from the
	// first (200 ms, a lower bound); table 2 at the WAL: 0.
	want := []float64{0.1, 0, 0.15, 0.2, 0}
	if len(lags) != len(want) {
		t.Fatalf("lags %v, want %v", lags, want)
	}
	for i := range want {
		if d := lags[i] - want[i]; d > 1e-9 || d < -1e-9 {
			t.Errorf("lag %d = %v, want %v (all %v)", i, lags[i], want[i], lags)
		}
	}
	if len(rss) != 2 || rss[0] != 2 || rss[1] != 4 {
		t.Errorf("rss %v, want [2 4] MiB", rss)
	}
	if l, _ := scaleLags(samples, at(300), at(400)); len(l) != 0 {
		t.Errorf("lags after the last sample: %v", l)
	}
}

func TestCountBetween(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	ts := []time.Time{t0, t0.Add(time.Second), t0.Add(time.Second), t0.Add(2 * time.Second)}
	if n := countBetween(ts, t0.Add(time.Second), t0.Add(2*time.Second)); n != 2 {
		t.Errorf("countBetween [1s, 2s) = %d, want 2", n)
	}
	if n := countBetween(ts, t0, t0.Add(3*time.Second)); n != 4 {
		t.Errorf("countBetween [0, 3s) = %d, want 4", n)
	}
}
