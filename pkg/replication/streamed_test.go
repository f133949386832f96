package replication

import (
	"slices"
	"testing"
)

// TestXidRingFrom: the ring keeps the last streamedCap xids, and from returns those not below
// its argument in the 32-bit xids' circular order (across a wraparound too).
func TestXidRingFrom(t *testing.T) {
	var r xidRing
	for x := uint32(1); x <= streamedCap+10; x++ {
		r.add(x)
	}
	if len(r.xids) != streamedCap {
		t.Fatalf("ring holds %d xids, want %d", len(r.xids), streamedCap)
	}
	if got := r.from(streamedCap + 8); !slices.Equal(got, []uint32{streamedCap + 8, streamedCap + 9, streamedCap + 10}) {
		t.Errorf("from(%d) = %v", streamedCap+8, got)
	}
	if got := r.from(5); len(got) != streamedCap {
		t.Errorf("from(5) = %d xids, want every one kept (%d; 1 to 10 were overwritten)", len(got), streamedCap)
	}
	if got := r.from(streamedCap + 11); len(got) != 0 {
		t.Errorf("from past the newest = %v, want none", got)
	}

	var w xidRing
	for _, x := range []uint32{1<<32 - 2, 1<<32 - 1, 3, 4} { // xids wrapped around
		w.add(x)
	}
	if got := w.from(1<<32 - 1); !slices.Equal(got, []uint32{1<<32 - 1, 3, 4}) {
		t.Errorf("from across the wraparound = %v, want [4294967295 3 4]", got)
	}
}
