package consumer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/watermark"
)

// forge queues a watermark record as given (not as cdc would write it).
func (f *fakeCDC) forge(r watermark.Record) {
	f.t.Helper()
	b, err := watermark.Encode(r)
	if err != nil {
		f.t.Fatal(err)
	}
	f.batch = append(f.batch, &kgo.Record{Topic: f.wmTopic, Key: r.Key(), Value: b})
}

// TestContractRecords: a watermark record that no cdc writes stops the reader with an error
// that names it (topic, partition, offset), before anything of it is delivered: on c9cb695 the
// forged watermark moved the cuts to FFFFFFFF/FFFFFF00, a partition the topic lacks and a
// topic not derived from the prefix were waited for in silence, and a copy range going
// backwards was loaded.
func TestContractRecords(t *testing.T) {
	forged := change.LSN(0xFFFFFFFF_FFFFFF00)
	cases := []struct {
		name  string
		forge func(f *fakeCDC, a change.ExportID)
		want  string
	}{
		{"quiet watermark beyond any WAL", func(f *fakeCDC, a change.ExportID) {
			b, err := watermark.EncodeQuiet(watermark.Quiet{Mode: watermark.ModeIndependent, Watermark: &forged, Position: 200, Time: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			f.batch = append(f.batch, &kgo.Record{Topic: f.wmTopic, Key: []byte(watermark.QuietKey), Value: b})
		}, "quiet record's watermark FFFFFFFF/FFFFFF00 is beyond any server's WAL"},
		{"own watermark beyond any WAL", func(f *fakeCDC, a change.ExportID) {
			f.forge(watermark.Record{Export: a, Topic: f.topic(a), State: hydrated, Watermark: &forged, Position: 200,
				Offsets: f.offsets(a), Snapshot: &watermark.SnapshotInfo{Attempt: 1}})
		}, "watermark of public.a FFFFFFFF/FFFFFF00 is beyond any server's WAL"},
		{"partition the topic lacks", func(f *fakeCDC, a change.ExportID) {
			w := change.LSN(300)
			f.forge(watermark.Record{Export: a, Topic: f.topic(a), State: hydrated, Watermark: &w, Position: w,
				Offsets: map[int32]int64{0: 1, 7: 0}, Snapshot: &watermark.SnapshotInfo{Attempt: 2, StartOffsets: map[int32]int64{0: 1, 7: 0}}})
		}, "names partition 7 of topic"},
		{"topic not derived from the prefix", func(f *fakeCDC, a change.ExportID) {
			w := change.LSN(300)
			f.forge(watermark.Record{Export: a, Topic: f.wmTopic, State: hydrated, Watermark: &w, Position: w,
				Offsets: map[int32]int64{0: 0}, Snapshot: &watermark.SnapshotInfo{Attempt: 1}})
		}, ""}, // the topics' names are made per test: see below
		{"copy range going backwards", func(f *fakeCDC, a change.ExportID) {
			w := change.LSN(300)
			f.forge(watermark.Record{Export: a, Topic: f.topic(a), State: hydrated, Watermark: &w, Position: w,
				Offsets: map[int32]int64{0: 0}, Snapshot: &watermark.SnapshotInfo{Attempt: 2, StartOffsets: map[int32]int64{0: 1}}})
		}, "copy attempt 2 of public.a goes backwards in partition 0: it starts at offset 1 and ends at 0"},
		{"offsets going back", func(f *fakeCDC, a change.ExportID) {
			w := change.LSN(300)
			f.forge(watermark.Record{Export: a, Topic: f.topic(a), State: hydrated, Watermark: &w, Position: w,
				Offsets: map[int32]int64{0: 0}, Snapshot: &watermark.SnapshotInfo{Attempt: 1}})
		}, "partition 0's offset went back from 1 to 0"},
		{"attempt going back", func(f *fakeCDC, a change.ExportID) {
			w := change.LSN(300)
			f.forge(watermark.Record{Export: a, Topic: f.topic(a), State: hydrated, Watermark: &w, Position: w,
				Offsets: f.offsets(a), Snapshot: &watermark.SnapshotInfo{Attempt: 0}})
		}, "copy attempt 0 after attempt 1"},
		{"system schema", func(f *fakeCDC, a change.ExportID) {
			w := change.LSN(300)
			sys := change.ExportID{Schema: "pg_catalog", Table: "pg_description"}
			f.forge(watermark.Record{Export: sys, Topic: change.TopicName(f.prefix, sys), State: hydrated, Watermark: &w, Position: w,
				Offsets: map[int32]int64{0: 0}, Snapshot: &watermark.SnapshotInfo{Attempt: 1}})
		}, "export pg_catalog.pg_description is in a system schema"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, 1, codec.FormatJSON)
			a := f.table("a")
			f.copyRows(a, 100, 1, 1)
			f.step(func() { f.mark(a, hydrated, 100, 1, map[int32]int64{0: 0}) })
			rd := f.reader(nil, false)
			want(t, next(t, rd), "100 joined:a 99/0:a.r1")
			f.insert(a, 150, 7, 0, 2, "x")
			f.step(func() { tc.forge(f, a) })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := rd.Next(ctx)
			if err == nil {
				t.Fatalf("the forged record was taken: cut %s", describe(c))
			}
			wantMsg := tc.want
			if tc.name == "topic not derived from the prefix" {
				wantMsg = "names topic \"" + f.wmTopic + "\", not \"" + f.topic(a) + "\""
			}
			if !errors.Is(err, ErrContract) || !strings.Contains(err.Error(), wantMsg) ||
				!strings.Contains(err.Error(), "watermark topic "+f.wmTopic+"[0] offset ") {
				t.Fatalf("error %q: want ErrContract naming the record and %q", err, wantMsg)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestMissingTableReported: a chosen table the watermark topic does not name (a typo) is
// reported once the reader has read what the topic held, instead of a silent wait.
func TestMissingTableReported(t *testing.T) {
	f := newFake(t, 1, codec.FormatJSON)
	a := f.table("a")
	f.step(func() { f.mark(a, hydrated, 100, 1, nil) })
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{&mu, &buf}, nil))
	rd, err := New(Config{Brokers: f.brokers, WatermarkTopic: f.wmTopic, TopicPrefix: f.prefix, WaitAll: true, Logger: log,
		Tables: []change.ExportID{a, {Schema: "public", Table: "misspelt"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := rd.Next(ctx); err == nil {
		t.Fatalf("a cut without the missing table: %s", describe(c))
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "chosen tables are not in the watermark topic") || !strings.Contains(buf.String(), "public.misspelt") ||
		strings.Contains(buf.String(), "public.a ") {
		t.Fatalf("log %q: want public.misspelt reported as missing", buf.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
