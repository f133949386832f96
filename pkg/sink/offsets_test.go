package sink

import (
	"maps"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

// A snapshot never changes after it is taken, shares the maps of topics that did not move, and
// is handed out again while nothing moved.
func TestOffsetSnapshotsCopyOnWrite(t *testing.T) {
	tr := newOffsetTracker()
	tr.seed("a", map[int32]int64{0: 5, 1: 7})
	tr.advance("b", 0, 9)
	s1 := tr.snapshot()
	want1 := change.Offsets{"a": {0: 5, 1: 7}, "b": {0: 10}}
	if !equalOffsets(s1, want1) {
		t.Fatalf("first snapshot %v, want %v", s1, want1)
	}
	if s := tr.snapshot(); !sameMaps(s, s1) {
		t.Fatal("a snapshot with nothing moved is a new map")
	}

	tr.advance("a", 1, 7)               // next 8
	tr.advance("a", 0, 2)               // below: no change
	tr.advance("c", 3, 0)               // a new topic
	tr.seed("b", map[int32]int64{0: 4}) // below: no change
	if !equalOffsets(s1, want1) {
		t.Fatalf("first snapshot changed to %v by later writes", s1)
	}
	s2 := tr.snapshot()
	want2 := change.Offsets{"a": {0: 5, 1: 8}, "b": {0: 10}, "c": {3: 1}}
	if !equalOffsets(s2, want2) {
		t.Fatalf("second snapshot %v, want %v", s2, want2)
	}
	if !sameMap(s1["b"], s2["b"]) {
		t.Error("topic b did not move, but the second snapshot copied its map")
	}
	if sameMap(s1["a"], s2["a"]) {
		t.Error("topic a moved, but both snapshots share its map")
	}

	// Two writes between snapshots copy once and both land.
	tr.advance("b", 0, 10)
	tr.advance("b", 1, 0)
	s3 := tr.snapshot()
	if want := map[int32]int64{0: 11, 1: 1}; !maps.Equal(s3["b"], want) {
		t.Fatalf("third snapshot of b %v, want %v", s3["b"], want)
	}
	if !maps.Equal(s2["b"], map[int32]int64{0: 10}) {
		t.Fatalf("second snapshot of b changed to %v", s2["b"])
	}
	if got := tr.topic("b"); !maps.Equal(got, s3["b"]) {
		t.Fatalf("topic(b) = %v, want %v", got, s3["b"])
	} else if got[0] = 99; tr.topic("b")[0] != 11 {
		t.Fatal("topic returned the tracker's own map")
	}
	if tr.topic("none") != nil {
		t.Fatal("topic of an unknown topic is not nil")
	}
}

func equalOffsets(a, b change.Offsets) bool {
	return maps.EqualFunc(a, b, func(x, y map[int32]int64) bool { return maps.Equal(x, y) })
}

// sameMap: a and b are the same map (writing one shows in the other).
func sameMap(a, b map[int32]int64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	const probe = -12345
	old, had := a[probe]
	a[probe] = 1
	_, same := b[probe]
	if had {
		a[probe] = old
	} else {
		delete(a, probe)
	}
	return same
}

func sameMaps(a, b change.Offsets) bool {
	const probe = "\x00probe"
	a[probe] = nil
	_, same := b[probe]
	delete(a, probe)
	return same
}
