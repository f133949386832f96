package fault

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// wmEntry is one watermark record as the recorder read it.
type wmEntry struct {
	partition int32
	offset    int64
	produced  time.Time // the record's timestamp, set by cdc when it produced it
	seen      time.Time // when the recorder read it (read-committed: when a consumer could)
	rec       watermark.Record
	// checkpoint: a checkpoint record (rec is empty); cp is its position.
	checkpoint bool
	cp         change.LSN
}

// wmRecorder follows the watermark topic read-committed from the start, for the whole scenario,
// so that every record any cdc run committed is seen, including those later compacted away.
type wmRecorder struct {
	mu      sync.Mutex
	entries []wmEntry
	latest  map[change.ExportID]watermark.Record
	view    *watermark.View
	bad     []string // undecodable records

	cancel context.CancelFunc
	done   chan struct{}
}

func startRecorder(t testing.TB, brokers []string, topic string) *wmRecorder {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(2*time.Second))
	if err != nil {
		t.Fatalf("watermark consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &wmRecorder{latest: make(map[change.ExportID]watermark.Record), view: watermark.NewView(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			seen := time.Now()
			fs.EachRecord(func(kr *kgo.Record) {
				if kr.Value == nil {
					return
				}
				r.mu.Lock()
				defer r.mu.Unlock()
				if cp, ok, err := watermark.DecodeCheckpoint(kr.Value); ok {
					if err != nil {
						r.bad = append(r.bad, fmt.Sprintf("offset %d: %v", kr.Offset, err))
						return
					}
					r.entries = append(r.entries, wmEntry{partition: kr.Partition, offset: kr.Offset, produced: kr.Timestamp, seen: seen, checkpoint: true, cp: cp.Position})
					return
				}
				// Read as a consumer does: a quiet record gives each export it speaks for a new
				// effective record (watermark.View), checked like any other.
				changed, err := r.view.Add(kr.Value)
				if err != nil {
					r.bad = append(r.bad, fmt.Sprintf("offset %d: %v", kr.Offset, err))
					return
				}
				for _, e := range changed {
					rec, _ := r.view.Get(e)
					r.entries = append(r.entries, wmEntry{partition: kr.Partition, offset: kr.Offset, produced: kr.Timestamp, seen: seen, rec: rec})
					r.latest[rec.Export] = rec
				}
			})
			// Fetch errors (broker down, connection cut) are retried by the client.
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *wmRecorder) stop() {
	r.cancel()
	<-r.done
}

// drain stops the recorder once it has read everything cdc committed: call it after cdc
// stopped. It waits until no record arrived for a second and a half (at most 20 s), so that the
// last transaction cdc committed on its way out, which the slot's last confirmation may cover,
// is among the entries.
func (r *wmRecorder) drain() {
	deadline := time.Now().Add(20 * time.Second)
	n, quiet := -1, time.Now()
	for time.Now().Before(deadline) {
		r.mu.Lock()
		m := len(r.entries)
		r.mu.Unlock()
		if m != n {
			n, quiet = m, time.Now()
		} else if time.Since(quiet) >= 1500*time.Millisecond {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.stop()
}

// watermarkOf returns the export's latest watermark and whether it has one.
func (r *wmRecorder) watermarkOf(e change.ExportID) (change.LSN, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.latest[e]
	if !ok || rec.Watermark == nil {
		return 0, false
	}
	return *rec.Watermark, true
}

// attempt returns the snapshot attempt of the export's latest record (0 when none).
func (r *wmRecorder) attempt(e change.ExportID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.latest[e]
	if !ok || rec.Snapshot == nil {
		return 0
	}
	return rec.Snapshot.Attempt
}

func (r *wmRecorder) describe(ids []change.ExportID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, e := range ids {
		rec, ok := r.latest[e]
		switch {
		case !ok:
			parts = append(parts, e.String()+": no record")
		case rec.Watermark == nil:
			parts = append(parts, fmt.Sprintf("%s: %s, no watermark", e, rec.State))
		default:
			parts = append(parts, fmt.Sprintf("%s: %s at %s", e, rec.State, *rec.Watermark))
		}
	}
	return fmt.Sprint(parts)
}

// waitWatermarks waits until every export has a watermark >= lsn, keeping cdc running. It
// reports a timeout (with the latest records and cdc's log) as a test error and returns false.
func waitWatermarks(t testing.TB, r *wmRecorder, sup *supervisor, timeout time.Duration, lsn change.LSN, ids []change.ExportID) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done := true
		for _, e := range ids {
			if w, ok := r.watermarkOf(e); !ok || w < lsn {
				done = false
			}
		}
		if done {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("watermarks did not reach %s within %s; latest: %s\ncdc log tail:\n%s",
				lsn, timeout, r.describe(ids), sup.tail(6000))
			return false
		}
		sup.check()
		time.Sleep(100 * time.Millisecond)
	}
}

// reachedAt returns when the recorder first read records that put every export of ids at a
// watermark >= lsn, and whether it has.
func (r *wmRecorder) reachedAt(lsn change.LSN, ids []change.ExportID) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := make(map[change.ExportID]bool, len(ids))
	for _, e := range ids {
		want[e] = true
	}
	passed := make(map[change.ExportID]bool, len(ids))
	for _, en := range r.entries {
		if en.checkpoint || !want[en.rec.Export] || en.rec.Watermark == nil || *en.rec.Watermark < lsn {
			continue
		}
		passed[en.rec.Export] = true
		if len(passed) == len(want) {
			return en.seen, true
		}
	}
	return time.Time{}, false
}

// checkMonotonic reports every watermark that moved backwards within its export, in offset order
// (across all cdc runs), and every failed or removed export. It returns the number of regressions.
func (r *wmRecorder) checkMonotonic(t testing.TB) (regressions, records int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bad {
		t.Errorf("undecodable watermark record: %s", b)
	}
	entries := append([]wmEntry(nil), r.entries...)
	sort.SliceStable(entries, func(i, j int) bool {
		if entries[i].partition != entries[j].partition {
			return entries[i].partition < entries[j].partition
		}
		return entries[i].offset < entries[j].offset
	})
	type last struct {
		w   change.LSN
		off int64
	}
	max := map[change.ExportID]last{}
	failed := map[change.ExportID]bool{}
	for _, en := range entries {
		if en.checkpoint {
			continue
		}
		rec := en.rec
		if rec.State == watermark.StateFailed || rec.State == watermark.StateRemoved {
			if !failed[rec.Export] {
				t.Errorf("export %s is %s (offset %d): %s", rec.Export, rec.State, en.offset, rec.Error)
			}
			failed[rec.Export] = true
		}
		if rec.Watermark == nil {
			continue
		}
		prev, ok := max[rec.Export]
		if ok && *rec.Watermark < prev.w {
			if regressions < 5 {
				t.Errorf("watermark of %s moved backwards: %s at offset %d after %s at offset %d",
					rec.Export, *rec.Watermark, en.offset, prev.w, prev.off)
			}
			regressions++
			continue
		}
		max[rec.Export] = last{*rec.Watermark, en.offset}
	}
	if regressions > 0 {
		t.Errorf("%d watermark records moved backwards (of %d)", regressions, len(entries))
	}
	return regressions, len(entries)
}

// slotSample is the slot's confirmed_flush_lsn at one moment.
type slotSample struct {
	at        time.Time
	confirmed change.LSN
}

// sampleSlot reads the slot's confirmed position every 200ms, reconnecting when PostgreSQL
// restarts, until stop is called.
func sampleSlot(t testing.TB, dbURL, slot string) (stop func() []slotSample) {
	t.Helper()
	var mu sync.Mutex
	var samples []slotSample
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			if conn == nil || conn.IsClosed() {
				c, err := pgx.Connect(ctx, dbURL)
				if err != nil {
					continue
				}
				conn = c
			}
			qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
			var s *string
			err := conn.QueryRow(qctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s)
			qcancel()
			if err != nil {
				if !errors.Is(err, pgx.ErrNoRows) {
					conn.Close(context.Background())
					conn = nil
				}
				continue
			}
			if s == nil {
				continue
			}
			l, err := change.ParseLSN(*s)
			if err != nil {
				continue
			}
			mu.Lock()
			samples = append(samples, slotSample{at: time.Now(), confirmed: l})
			mu.Unlock()
		}
	}()
	return func() []slotSample {
		cancel()
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return samples
	}
}

// checkSlotNeverAhead asserts that whenever the slot was confirmed at C, every export that was
// hydrated then had a durable own position >= C, produced before that moment: the slot never
// passed what Kafka held. The durable own position is the higher of the export's last watermark
// record's position and the last checkpoint's, what a restart resumes it from. (The same
// comparison as the integration package's checkSlotNeverAhead, over the records of every cdc
// run.) It returns the number of (sample, export) pairs compared and the number of violations.
func (r *wmRecorder) checkSlotNeverAhead(t testing.TB, samples []slotSample) (checked, bad int) {
	t.Helper()
	r.mu.Lock()
	all := append([]wmEntry(nil), r.entries...)
	r.mu.Unlock()
	sort.SliceStable(all, func(i, j int) bool { return all[i].produced.Before(all[j].produced) })
	latest := map[change.ExportID]watermark.Record{}
	var cp change.LSN
	i := 0
	for _, s := range samples {
		for ; i < len(all) && !all[i].produced.After(s.at); i++ {
			if all[i].checkpoint {
				cp = max(cp, all[i].cp)
				continue
			}
			latest[all[i].rec.Export] = all[i].rec
		}
		if s.confirmed == 0 {
			continue
		}
		for ex, rec := range latest {
			if rec.State != watermark.StateHydrated {
				continue
			}
			checked++
			if pos := max(rec.Position, cp); pos < s.confirmed {
				if bad < 5 {
					t.Errorf("at %s the slot was confirmed at %s but %s's durable own position was %s (record %s, checkpoint %s)",
						s.at.Format(time.StampMilli), s.confirmed, ex, pos, rec.Position, cp)
				}
				bad++
			}
		}
	}
	if checked == 0 {
		t.Errorf("slot check compared nothing (%d samples, %d watermark records)", len(samples), len(all))
	}
	if bad > 0 {
		t.Errorf("slot confirmed past Kafka's durable position in %d of %d (sample, export) pairs", bad, checked)
	}
	return checked, bad
}
