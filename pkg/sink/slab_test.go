package sink

import "testing"

// TestSlabsKeptForAWholeBatch: a batch needs as many slabs as the one before it allocates none
// (a batch of 353-byte records, 16 MiB, needs about 190), and a smaller batch lets the surplus go.
func TestSlabsKeptForAWholeBatch(t *testing.T) {
	s := &Sink{}
	batch := func(records int) {
		for range records {
			s.newRecord()
		}
		s.recycleSlabs()
	}
	const big = 190 * slabSize
	batch(big)
	if allocs := testing.AllocsPerRun(3, func() { batch(big) }); allocs != 0 {
		t.Errorf("a batch of %d records after one of the same size: %.0f allocations, want 0", big, allocs)
	}
	batch(10 * slabSize)
	if n := len(s.slab.free); n != 10 {
		t.Errorf("after a batch of 10 slabs: %d slabs kept, want 10", n)
	}
	batch(1)
	if n := len(s.slab.free); n != minFreeSlabs {
		t.Errorf("after a batch of one record: %d slabs kept, want %d", n, minFreeSlabs)
	}
}
