package pipeline

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchKafkaLogsAStall: a batch that waits for Kafka longer than kafkaStall is logged once
// at WARN (a silent broker otherwise shows only on /readyz), and its end at INFO.
func TestWatchKafkaLogsAStall(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	var wait atomic.Int64
	wait.Store(int64(kafkaStall + time.Second))
	ctx := t.Context()
	go watchKafka(ctx, func() time.Duration {
		d := time.Duration(wait.Load())
		if d > 0 {
			wait.Add(int64(time.Second)) // the same batch waits on
		}
		return d
	}, log)
	logged := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(buf.String(), s)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !logged("kafka has not taken a batch for") {
		if time.Now().After(deadline) {
			t.Fatal("no warning for a batch waiting past kafkaStall")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2500 * time.Millisecond)
	mu.Lock()
	warnings := strings.Count(buf.String(), "level=WARN")
	mu.Unlock()
	if warnings != 1 {
		t.Fatalf("%d warnings for one stall, want 1:\n%s", warnings, buf.String())
	}
	wait.Store(0)
	for !logged("kafka takes batches again") {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("no line when Kafka took batches again")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
