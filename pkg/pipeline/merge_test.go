package pipeline

import (
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

func TestMergeUnitsPrefersStream(t *testing.T) {
	stream := make(chan *change.Unit, 10)
	bulk := make(chan *change.Unit, 10)
	out := make(chan *change.Unit)
	for i := range 5 {
		bulk <- &change.Unit{Kind: change.KindSnapshot, Rows: i}
	}
	for i := range 3 {
		stream <- &change.Unit{Kind: change.KindTxn, End: change.LSN(i + 1)}
	}
	close(stream)
	close(bulk)
	go mergeUnits(t.Context(), stream, bulk, out)

	var got []*change.Unit
	for u := range out {
		got = append(got, u)
	}
	if len(got) != 8 {
		t.Fatalf("merged %d units, want 8", len(got))
	}
	// Every waiting stream unit is sent before any bulk unit, in order.
	for i := range 3 {
		if got[i].Kind != change.KindTxn || got[i].End != change.LSN(i+1) {
			t.Fatalf("unit %d = %v %v, want stream unit %d first", i, got[i].Kind, got[i].End, i+1)
		}
	}
	for i := 3; i < 8; i++ {
		if got[i].Kind != change.KindSnapshot || got[i].Rows != i-3 {
			t.Fatalf("unit %d = %v rows %d, want bulk units in order", i, got[i].Kind, got[i].Rows)
		}
	}
}
