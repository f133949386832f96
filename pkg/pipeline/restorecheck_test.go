package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/watermark"
)

func TestRestoreGuard(t *testing.T) {
	errRead := errors.New("connection reset")
	for _, tc := range []struct {
		name string
		// ends are the WAL ends the guard reads, in order (the last one repeats); an entry of 0
		// is a failed read.
		ends    []change.LSN
		catchUp bool
		quiet   change.LSN // the quiet record's watermark
		refused bool
		readErr bool
		reads   int // at least
	}{
		{name: "within the bound", ends: []change.LSN{1000}, quiet: 900, reads: 1},
		{name: "at the bound", ends: []change.LSN{1000}, quiet: 1000, reads: 1},
		{name: "written after the first read", ends: []change.LSN{1000, 1200}, quiet: 1100, reads: 2},
		{name: "past the end of a primary's WAL", ends: []change.LSN{1000, 1001}, quiet: 0xFFFFFFFFFFFFFF00, refused: true, reads: 2},
		{name: "a standby catching up", ends: []change.LSN{1000, 1000, 1000, 1100}, catchUp: true, quiet: 1100, reads: 4},
		{name: "a standby that never reaches it", ends: []change.LSN{1000}, catchUp: true, quiet: 0xFFFFFFFFFFFFFF00, refused: true, reads: 3},
		{name: "the second read fails", ends: []change.LSN{1000, 0}, quiet: 1100, readErr: true, reads: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			g := &restoreGuard{wait: 50 * time.Millisecond, poll: 10 * time.Millisecond, read: func(context.Context) (walEnd, error) {
				at := tc.ends[min(reads, len(tc.ends)-1)]
				reads++
				if at == 0 {
					return walEnd{}, errRead
				}
				return walEnd{at: at, what: "the end of the WAL", catchUp: tc.catchUp}, nil
			}}
			rd := watermark.NewTopicReader()
			if err := g.start(t.Context(), rd); err != nil {
				t.Fatal(err)
			}
			add := g.add(t.Context(), rd)
			own, err := watermark.Encode(watermark.Record{Export: change.ExportID{Schema: "public", Table: "t"}, Topic: "p.public.t",
				State: watermark.StateHydrated, Mode: watermark.ModeIndependent, Watermark: new(change.LSN(800)), Position: 800})
			if err != nil {
				t.Fatal(err)
			}
			quiet, err := watermark.EncodeQuiet(watermark.Quiet{Mode: watermark.ModeIndependent, Watermark: &tc.quiet, Position: 800})
			if err != nil {
				t.Fatal(err)
			}
			if err := add(0, own); err != nil {
				t.Fatal(err)
			}
			err = add(0, quiet)
			past, refused := errors.AsType[*pastWALError](err)
			switch {
			case refused != tc.refused:
				t.Fatalf("refused = %v (%v), want %v", refused, err, tc.refused)
			case tc.readErr != errors.Is(err, errRead) || tc.readErr != errors.Is(g.err, errRead):
				t.Fatalf("err = %v, g.err = %v; want the read's error: %v", err, g.err, tc.readErr)
			case !tc.refused && !tc.readErr && err != nil:
				t.Fatalf("refused a value within the end of the WAL: %v", err)
			case reads < tc.reads:
				t.Errorf("read the end of the WAL %d times, want at least %d", reads, tc.reads)
			}
			if tc.refused {
				if past.lsn != tc.quiet || past.end.at != tc.ends[len(tc.ends)-1] || past.field != "the quiet record's watermark" {
					t.Errorf("refusal %+v: want the quiet record's watermark %s past %s", *past, tc.quiet, tc.ends[len(tc.ends)-1])
				}
				if tc.catchUp != (past.waited > 0) {
					t.Errorf("waited %s for a standby (catch-up %v)", past.waited, tc.catchUp)
				}
			}
			recs, _ := rd.Result()
			if !tc.refused && !tc.readErr && (len(recs) != 1 || *recs[0].Watermark != max(800, tc.quiet)) {
				t.Errorf("restored %+v, want the quiet record's watermark %s", recs, tc.quiet)
			}
		})
	}
}

func TestRefuseRestore(t *testing.T) {
	cfg := Config{Sink: sink.Config{WatermarkTopic: "p.__watermarks"}}
	bad := &sink.RecordError{Topic: "p.__watermarks", Partition: 0, Offset: 41}
	past := &pastWALError{field: "the quiet record's watermark", lsn: 0xFFFFFFFFFFFFFF00,
		end: walEnd{at: 0x1A2B3C8, what: "the end of this server's WAL (pg_current_wal_insert_lsn())"}}
	bad.Err = past
	for _, tc := range []struct {
		name string
		tl   replication.Timeline
		want []string
		not  []string
	}{
		{name: "primary", tl: replication.Timeline{ID: 1},
			want: []string{"watermark topic p.__watermarks partition 0 offset 41: the quiet record's watermark FFFFFFFF/FFFFFF00 is past the end of this server's WAL (pg_current_wal_insert_lsn()), 0/1A2B3C8",
				"not written by cdc for this database", "another database", "delete the watermark topic p.__watermarks", "CDC_TOPIC_PREFIX"},
			not: []string{"promoted"}},
		{name: "promoted server", tl: replication.Timeline{ID: 2, SwitchPoint: 0x1000000},
			want: []string{"failover: this server was promoted at 0/1000000 (timeline 2), and watermark topic p.__watermarks partition 0 offset 41: the quiet record's watermark FFFFFFFF/FFFFFF00 is past",
				"never received", "not written by cdc for this database", "synchronized_standby_slots", "delete the watermark topic p.__watermarks"}},
		{name: "promoted server, value before the promotion", tl: replication.Timeline{ID: 2, SwitchPoint: 0xFFFFFFFFFFFFFF00},
			want: []string{"watermark topic p.__watermarks partition 0 offset 41", "not written by cdc for this database"},
			not:  []string{"promoted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refuseRestore(cfg, bad, past, tc.tl)
			if !errors.Is(err, ErrFatal) {
				t.Fatalf("not fatal: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error has %q:\n%v", n, err)
				}
			}
		})
	}
}
