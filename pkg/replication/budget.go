package replication

import "sync"

// budget bounds the bytes of transactions handed to the sink and not yet durable. The stream
// goroutine takes from it before emitting a transaction or a piece; the sink's progress gives
// back (Unit.Release), from its own goroutine, without blocking.
type budget struct {
	mu    sync.Mutex
	used  int64
	limit int64
	// freed (capacity 1) is signalled when bytes come back.
	freed chan struct{}
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, freed: make(chan struct{}, 1)}
}

// take takes n bytes if they fit, or if nothing is taken (a unit larger than the whole budget
// goes alone); it reports whether it did.
func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used > 0 && b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// give returns n bytes taken before.
func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// inUse returns the bytes taken and not given back.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
