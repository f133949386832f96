package sink

import (
	"maps"
	"sync"

	"github.com/tidemark/cdc/pkg/change"
)

// offsetTracker is written by produce promises and read by Run. Its methods only take a
// short lock and never block on anything else.
//
// Snapshots share the per-topic maps of topics that did not move since the last one: a topic's
// map is copied on its first write after a snapshot (copy on write), so a snapshot copies the
// map of topics (one pointer per topic) and the per-topic maps of the topics written since the
// last one, not every topic's map (with 10,000 tables, a deep copy per batch made garbage in
// proportion to the tables).
type offsetTracker struct {
	mu   sync.Mutex
	next change.Offsets
	// gen counts the snapshots taken; own[topic] == gen when next[topic] was made after the
	// last one, so no snapshot shares it and it may be written in place.
	gen uint64
	own map[string]uint64
	// last is the last snapshot, handed out again while nothing moved.
	last  change.Offsets
	moved bool
}

func newOffsetTracker() *offsetTracker {
	return &offsetTracker{next: change.Offsets{}, own: make(map[string]uint64), gen: 1}
}

// advance records that Kafka holds offset off of topic/partition.
func (t *offsetTracker) advance(topic string, partition int32, off int64) {
	t.mu.Lock()
	t.raiseLocked(topic, partition, off+1)
	t.mu.Unlock()
}

// seed raises the known next offsets to ends (end offsets listed from the broker).
func (t *offsetTracker) seed(topic string, ends map[int32]int64) {
	t.mu.Lock()
	for p, off := range ends {
		t.raiseLocked(topic, p, off)
	}
	t.mu.Unlock()
}

func (t *offsetTracker) raiseLocked(topic string, partition int32, next int64) {
	parts := t.next[topic]
	if cur, ok := parts[partition]; ok && next <= cur {
		return
	}
	if t.own[topic] != t.gen {
		// Shared with a snapshot (or new): write a copy.
		parts = maps.Clone(parts)
		if parts == nil {
			parts = make(map[int32]int64)
		}
		t.next[topic] = parts
		t.own[topic] = t.gen
	}
	parts[partition] = next
	t.moved = true
}

// snapshot returns every topic's next offsets. The snapshot is read-only: its maps may be
// shared with earlier and later snapshots.
func (t *offsetTracker) snapshot() change.Offsets {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil || t.moved {
		t.last = maps.Clone(t.next)
		t.gen++
		t.moved = false
	}
	return t.last
}

// sweep calls fn for every topic the tracker knows, with whether it was written (or seeded)
// since generation since: in a snapshot taken at or after it, or after the last snapshot. It
// returns the generation now, the since of the next sweep.
func (t *offsetTracker) sweep(since uint64, fn func(topic string, written bool)) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for topic, g := range t.own {
		fn(topic, g >= since)
	}
	return t.gen
}

// topic returns a copy of one topic's next offsets (nil when unknown).
func (t *offsetTracker) topic(topic string) map[int32]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.next[topic])
}
