package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// BenchmarkDecodeTxn decodes and encodes transactions of 100 inserts into a hydrated export,
// from pgoutput messages to the unit handed to the sink: the replication stage's per-change
// path (parse, route, encode). ns/change and allocs/change are per insert.
func BenchmarkDecodeTxn(b *testing.B) {
	const perTxn = 100
	s := New(Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true}, SpillDir: b.TempDir(), HoldMemory: 1 << 20}, fakeHooks{})
	s.Resume(map[change.ExportID]change.LSN{tA: 0})
	out := make(chan *change.Unit, 1)
	st := s.state
	st.ctx, st.out = b.Context(), out
	if err := st.handle(relationMsg(1, "public", "a")); err != nil {
		b.Fatal(err)
	}
	inserts := make([][]byte, perTxn)
	for i := range inserts {
		inserts[i] = insert(1, fmt.Sprint(i+1), fmt.Sprintf("a value of some length for row %d, like a short text column", i))
	}
	beginMsg, commitMsg := begin(0, 1), commit(0, 0)
	// Offsets of the LSN fields inside the XLogData frames (25-byte header, then the message).
	const hdr = 25
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		lsn := uint64(i+1) * 1000
		binary.BigEndian.PutUint64(beginMsg[hdr+1:], lsn)
		binary.BigEndian.PutUint64(commitMsg[hdr+2:], lsn)
		binary.BigEndian.PutUint64(commitMsg[hdr+10:], lsn+1)
		if err := st.handle(beginMsg); err != nil {
			b.Fatal(err)
		}
		for _, m := range inserts {
			if err := st.handle(m); err != nil {
				b.Fatal(err)
			}
		}
		if err := st.handle(commitMsg); err != nil {
			b.Fatal(err)
		}
		u := <-out
		if len(u.Records) != perTxn {
			b.Fatalf("unit of %d records, want %d", len(u.Records), perTxn)
		}
		// What the sink does once the unit is durable: without it the in-flight byte budget
		// runs out and the stage waits for ever.
		u.Claim.Return()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perTxn), "ns/change")
}

// BenchmarkDecodeTxnChunking is BenchmarkDecodeTxn for an export copied in chunks: with no
// chunk in flight (its keys are kept for the chunks to come, until a chunk's snapshot sees
// their transaction), and with one chunk's window open. allocs/op are per transaction of 100
// inserts.
func BenchmarkDecodeTxnChunking(b *testing.B) {
	for _, window := range []bool{false, true} {
		b.Run(fmt.Sprintf("window=%v", window), func(b *testing.B) {
			const perTxn = 100
			s := New(Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true}, SpillDir: b.TempDir(), HoldMemory: 1 << 20, MarkerTag: testTag}, fakeHooks{})
			out := make(chan *change.Unit, 1)
			st := s.state
			st.ctx, st.out = b.Context(), out
			st.startChunking(tA, 0)
			if err := st.handle(relationMsg(1, "public", "a")); err != nil {
				b.Fatal(err)
			}
			if window {
				st.openWindow(1, tA, 0)
				if err := st.handle(markerMsg(1, change.ChunkMarker(testTag, 1, false))); err != nil {
					b.Fatal(err)
				}
			}
			inserts := make([][]byte, perTxn)
			for i := range inserts {
				inserts[i] = insert(1, fmt.Sprint(i+1), fmt.Sprintf("a value of some length for row %d, like a short text column", i))
			}
			beginMsg, commitMsg := begin(0, 1), commit(0, 0)
			msgs := append(append([][]byte{beginMsg}, inserts...), commitMsg)
			const hdr = 25
			b.ReportAllocs()
			lsn := uint64(1000)
			for b.Loop() {
				lsn += 1000
				binary.BigEndian.PutUint64(beginMsg[hdr+1:], lsn)
				binary.BigEndian.PutUint64(commitMsg[hdr+2:], lsn)
				binary.BigEndian.PutUint64(commitMsg[hdr+10:], lsn+1)
				for _, m := range msgs {
					if err := st.handle(m); err != nil {
						b.Fatal(err)
					}
				}
				u := <-out
				if len(u.Records) != perTxn {
					b.Fatalf("unit of %d records, want %d", len(u.Records), perTxn)
				}
				u.Claim.Return()
			}
		})
	}
}

// BenchmarkStream is BenchmarkDecodeTxn through the stream loop, as the stage runs it: the
// messages arrive on a channel (fed by another goroutine, like receive) and the units leave on
// another (drained by another goroutine, like the sink). encoders is Config.Encoders; the stage
// runs at most one worker per P besides the stream goroutine (none with -cpu 1). op is a
// transaction of 100 inserts; changes/s counts the inserts.
func BenchmarkStream(b *testing.B) {
	for _, encoders := range []int{0, 4} {
		b.Run(fmt.Sprintf("encoders=%d", encoders), func(b *testing.B) {
			const perTxn = 100
			s := New(Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true}, SpillDir: b.TempDir(), HoldMemory: 1 << 20,
				Encoders: encoders}, fakeHooks{})
			s.Resume(map[change.ExportID]change.LSN{tA: 0})
			msgs := make(chan []byte, 4096)
			out := make(chan *change.Unit, 64)
			txn := [][]byte{begin(1000, 1)}
			for i := range perTxn {
				txn = append(txn, insert(1, fmt.Sprint(i+1), fmt.Sprintf("a value of some length for row %d, like a short text column", i)))
			}
			txn = append(txn, commit(1000, 1001))
			go func() {
				msgs <- relationMsg(1, "public", "a")
				for range b.N {
					for _, m := range txn {
						msgs <- m
					}
				}
			}()
			// The sink's side: it ends the loop once it has every record.
			ctx, cancel := context.WithCancel(b.Context())
			defer cancel()
			go func() {
				n := 0
				for u := range out {
					n += len(u.Records)
					if u.Claim != nil {
						u.Claim.Return()
					}
					if n == b.N*perTxn {
						cancel()
					}
				}
			}()
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			if err := s.streamLoop(ctx, msgs, out); !errors.Is(err, context.Canceled) {
				b.Fatalf("loop ended with %v before the sink had every record", err)
			}
			b.StopTimer()
			n := float64(b.N * perTxn)
			b.ReportMetric(n/b.Elapsed().Seconds(), "changes/s")
			// The process's CPU (all goroutines: feeding and draining too) per change, and the
			// share of the changes a worker encoded: counts that a loaded machine moves less
			// than changes/s.
			b.ReportMetric(float64(processCPU(b)-cpu0)/n, "cpu-ns/change")
			b.ReportMetric(float64(s.state.preUsed)/n, "by-workers/change")
		})
	}
}

// processCPU is the process's user and system CPU time so far, in nanoseconds.
func processCPU(tb testing.TB) int64 {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
