package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Larger batching than the sink's, for the write ceiling.
const (
	producerTunedBatch    = 1_000_000 // under the broker's default max.message.bytes
	producerTunedLinger   = 20 * time.Millisecond
	producerTunedBuffered = 128 << 20
)

// ceilingRun is one producer profile of the write ceiling.
type ceilingRun struct {
	Profile   string     `json:"profile"`
	Producers int        `json:"producers"`
	Result    throughput `json:"result"`
}

// writeCeiling looks for the broker's ceiling for these records: the same n records produced
// with the sink's settings and with larger batches, by one producer and by two producers at
// once (each into a topic of its own, half of the records each), idempotent without
// transactions (the cheapest way a producer can write them). It returns every run; the highest
// is the ceiling.
func writeCeiling(ctx context.Context, k *kafkaClient, samples []sampleRecord, policy map[string]string, prefix string, n int64) ([]ceilingRun, error) {
	var runs []ceilingRun
	for _, producers := range []int{1, 2} {
		for _, tuned := range []bool{false, true} {
			profile := "sink settings"
			if tuned {
				profile = "larger batches"
			}
			var mu sync.Mutex
			var total writeResult
			var firstErr error
			var wg sync.WaitGroup
			var slowest float64
			for p := range producers {
				dest := make(map[string]string, len(policy))
				i := 0
				for src := range policy {
					dest[src] = fmt.Sprintf("%s%d%s%d.%d", prefix, producers, map[bool]string{false: "s", true: "t"}[tuned], p, i)
					i++
				}
				wg.Go(func() {
					r, err := writeLimitWith(ctx, k, samples, dest, policy, n/int64(producers), 0, false, tuned)
					mu.Lock()
					defer mu.Unlock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					total.Records += r.Records
					total.Bytes += r.Bytes
					slowest = max(slowest, r.Seconds)
				})
			}
			wg.Wait()
			if firstErr != nil {
				return runs, firstErr
			}
			// Each producer's clock starts after its topic exists; the slowest one's time is
			// the run's.
			runs = append(runs, ceilingRun{Profile: profile, Producers: producers,
				Result: newThroughput(total.Records, total.Bytes, time.Duration(slowest*float64(time.Second)), "")})
		}
	}
	return runs, nil
}

// brokerSettings returns the broker's server.properties (without comments) and JVM flags when
// the bench started the broker itself, for the report.
func brokerSettings(stateDir, heap string) string {
	b, err := os.ReadFile(filepath.Join(stateDir, "kafka", "server.properties"))
	if err != nil {
		return "external broker (settings unknown)"
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.Contains(line, "dir") || strings.Contains(line, "listeners") || strings.Contains(line, "quorum") {
			continue
		}
		kept = append(kept, line)
	}
	return "JVM " + heap + "; " + strings.Join(kept, ", ")
}

// bestCeiling is the fastest of the write ceiling's runs.
func bestCeiling(runs []ceilingRun) throughput {
	var best throughput
	for _, c := range runs {
		if c.Result.PerSecond > best.PerSecond {
			best = c.Result
		}
	}
	return best
}
