package replication

import (
	"os"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

func heldUnit(commit change.LSN, size int) *change.Unit {
	return &change.Unit{
		Kind:   change.KindHeld,
		Commit: commit,
		End:    commit + 8,
		Records: []change.Record{{
			Topic: "t", Key: []byte(`{"id":1}`), Value: make([]byte, size),
		}},
	}
}

func TestHoldBufferOrderAndSpill(t *testing.T) {
	tests := []struct {
		name      string
		limit     int64
		n         int
		dropBelow change.LSN
		wantFiles bool
	}{
		{name: "memory only", limit: 1 << 20, n: 50},
		{name: "spills", limit: 1000, n: 200, wantFiles: true},
		{name: "spills then drop prefix", limit: 1000, n: 200, dropBelow: 100 * 16, wantFiles: true},
		{name: "memory drop prefix", limit: 1 << 20, n: 50, dropBelow: 10 * 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			h := newHoldBuffer(tt.limit, dir)
			defer h.Close()
			for i := range tt.n {
				if err := h.Add(heldUnit(change.LSN(i*16), 100)); err != nil {
					t.Fatal(err)
				}
			}
			entries, _ := os.ReadDir(dir)
			if got := len(entries) > 0; got != tt.wantFiles {
				t.Fatalf("spill files present = %v, want %v", got, tt.wantFiles)
			}
			if tt.dropBelow > 0 {
				if err := h.DropBelow(tt.dropBelow); err != nil {
					t.Fatal(err)
				}
			}
			want := change.LSN(0)
			if tt.dropBelow > 0 {
				want = tt.dropBelow
			}
			count := 0
			err := h.Drain(func(u *change.Unit) error {
				if u.Commit != want {
					t.Fatalf("drained commit %v, want %v", u.Commit, want)
				}
				if len(u.Records) != 1 || len(u.Records[0].Value) != 100 {
					t.Fatalf("unit records mangled: %+v", u.Records)
				}
				want += 16
				count++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if wantCount := tt.n - int(tt.dropBelow/16); count != wantCount {
				t.Fatalf("drained %d units, want %d", count, wantCount)
			}
			if h.Len() != 0 {
				t.Fatalf("Len after drain = %d", h.Len())
			}
			entries, _ = os.ReadDir(dir)
			if len(entries) != 0 {
				t.Fatalf("spill files left after drain: %v", entries)
			}
		})
	}
}
