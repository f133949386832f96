package wait

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// topicOf starts kfake with a watermark topic and returns a producer to it.
func topicOf(t *testing.T) ([]string, string, func(values ...[]byte)) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const topic = "w.__watermarks"
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	produce := func(values ...[]byte) {
		t.Helper()
		for _, v := range values {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return c.ListenAddrs(), topic, produce
}

func own(t *testing.T, e change.ExportID, state watermark.State, w change.LSN) []byte {
	t.Helper()
	r := watermark.Record{Export: e, Topic: "x", State: state, Offsets: map[int32]int64{0: 1},
		Snapshot: &watermark.SnapshotInfo{Attempt: 1}, Time: time.Unix(0, 0)}
	if w > 0 {
		r.Watermark = &w
	}
	b, err := watermark.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func quiet(t *testing.T, w change.LSN, busy ...change.ExportID) []byte {
	t.Helper()
	b, err := watermark.EncodeQuiet(watermark.Quiet{Watermark: &w, Busy: busy, Time: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestUntil: Until waits through own and quiet records, returns once a quiet record lifts the
// export, never sees the watermark move back when a later quiet record lists it as busy, and
// fails with ErrExportStopped for a removed export.
func TestUntil(t *testing.T) {
	brokers, topic, produce := topicOf(t)
	T := change.ExportID{Schema: "public", Table: "t"}
	R := change.ExportID{Schema: "public", Table: "r"}
	produce(own(t, T, watermark.StateHydrated, 50), own(t, R, watermark.StateHydrated, 50))
	w, err := New(brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	done := make(chan error, 1)
	go func() {
		_, err := w.Until(ctx, 100, T)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Until returned before any record reached 100: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	produce(quiet(t, 100), quiet(t, 120, T))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Read the busy quiet record too, then ask again: T stays at 100.
	recs, err := w.Until(ctx, 100, T)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	for pctx.Err() == nil {
		_ = w.Poll(pctx)
	}
	pcancel()
	if got := w.Latest()[T].Watermark; got == nil || *got != 100 || *recs[T].Watermark != 100 {
		t.Fatalf("watermark of T after a busy quiet record: %v, want 0/64 (100)", got)
	}
	if got := w.Latest()[R].Watermark; got == nil || *got != 120 {
		t.Fatalf("watermark of R: %v, want 120", got)
	}
	produce(own(t, R, watermark.StateRemoved, 130))
	if _, err := w.Until(ctx, 200, R); !errors.Is(err, ErrExportStopped) {
		t.Fatalf("Until on a removed export: %v, want ErrExportStopped", err)
	}
}
