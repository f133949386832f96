package change

import (
	"math"
	"testing"
)

func TestXidSnapshotSees(t *testing.T) {
	snap := &XidSnapshot{Xmin: 100, Xmax: 110, Xip: []uint32{100, 104}}
	// Across the wrap of 32-bit xids: xmin just below it, xmax past it.
	wrapped := &XidSnapshot{Xmin: math.MaxUint32 - 5, Xmax: 4, Xip: []uint32{math.MaxUint32 - 5, 1}}
	for _, tc := range []struct {
		name string
		snap *XidSnapshot
		xid  uint32
		want bool
	}{
		{"below xmin", snap, 99, true},
		{"xmin running", snap, 100, false},
		{"between, not running", snap, 101, true},
		{"between, running", snap, 104, false},
		{"just below xmax", snap, 109, true},
		{"at xmax", snap, 110, false},
		{"above xmax", snap, 5000, false},
		{"nil snapshot", nil, 5000, true},
		{"wrapped: below xmin", wrapped, math.MaxUint32 - 6, true},
		{"wrapped: before the wrap, not running", wrapped, math.MaxUint32, true},
		{"wrapped: after the wrap, running", wrapped, 1, false},
		{"wrapped: after the wrap, not running", wrapped, 3, true},
		{"wrapped: at xmax", wrapped, 4, false},
	} {
		if got := tc.snap.Sees(tc.xid); got != tc.want {
			t.Errorf("%s: Sees(%d) = %v, want %v", tc.name, tc.xid, got, tc.want)
		}
	}
}
