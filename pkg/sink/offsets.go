package sink

import (
	"sync"

	"github.com/tidemark/cdc/pkg/change"
)

// offsetTracker is written by produce promises and read by Run. Its methods only take a
// short lock and never block on anything else.
type offsetTracker struct {
	mu   sync.Mutex
	next change.Offsets
}

func newOffsetTracker() *offsetTracker { return &offsetTracker{next: change.Offsets{}} }

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
	if parts == nil {
		parts = make(map[int32]int64)
		t.next[topic] = parts
	}
	if cur, ok := parts[partition]; !ok || next > cur {
		parts[partition] = next
	}
}

// snapshot returns a copy of every topic's next offsets.
func (t *offsetTracker) snapshot() change.Offsets {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next.Clone()
}

// topic returns a copy of one topic's next offsets (nil when unknown).
func (t *offsetTracker) topic(topic string) map[int32]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts, ok := t.next[topic]
	if !ok {
		return nil
	}
	c := make(map[int32]int64, len(parts))
	for p, off := range parts {
		c[p] = off
	}
	return c
}
