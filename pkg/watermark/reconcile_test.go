package watermark

import (
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

func TestReconcileRange(t *testing.T) {
	e := change.ExportID{Schema: "public", Table: "t"}
	now := time.Unix(100, 0)
	tests := []struct {
		name       string
		setup      func(tr *Tracker)
		wantNeeded bool
		wantFrom   map[int32]int64
	}{
		{
			name:  "first attempt on an empty topic",
			setup: func(tr *Tracker) { own(tr).StartHydration(e, "p.t", 100, 10, map[int32]int64{0: 0}, now) },
		},
		{
			name: "retried attempt reconciles from the first attempt's start",
			setup: func(tr *Tracker) {
				own(tr).StartHydration(e, "p.t", 100, 10, map[int32]int64{0: 5}, now)
				own(tr).StartHydration(e, "p.t", 200, 10, map[int32]int64{0: 50}, now)
			},
			wantNeeded: true,
			wantFrom:   map[int32]int64{0: 5},
		},
		{
			name: "re-added after removal reconciles from the beginning",
			setup: func(tr *Tracker) {
				own(tr).StartHydration(e, "p.t", 100, 10, map[int32]int64{0: 0}, now)
				tr.SnapshotCopied(e, now)
				own(tr).Hydrated(e, 150)
				own(tr).Removed(e, 300)
				own(tr).StartHydration(e, "p.t", 400, 10, map[int32]int64{0: 70}, now)
			},
			wantNeeded: true,
			wantFrom:   map[int32]int64{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(Options{})
			tt.setup(tr)
			r, ok := tr.ReconcileRange(e)
			if !ok {
				t.Fatal("ReconcileRange: not hydrating")
			}
			if r.Needed() != tt.wantNeeded {
				t.Fatalf("Needed() = %v, want %v (%+v)", r.Needed(), tt.wantNeeded, r)
			}
			if tt.wantNeeded && len(r.From) != len(tt.wantFrom) {
				t.Fatalf("From = %v, want %v", r.From, tt.wantFrom)
			}
			for p, o := range tt.wantFrom {
				if r.From[p] != o {
					t.Fatalf("From = %v, want %v", r.From, tt.wantFrom)
				}
			}
		})
	}
}
