package change

import (
	"context"
	"sync/atomic"
)

// Budget bounds what a stage has handed towards the sink and not seen durable yet: bytes of
// transactions (the replication stage), chunks whose rows are in memory (the chunker). The
// stage takes a Claim before it hands a unit over; the unit carries the claim; whoever holds
// the unit last gives it back with Claim.Return (the sink once the unit is durable, or the
// stage that drops it). Nothing is called back: the budget is a value every holder shares.
type Budget struct {
	used  atomic.Int64
	limit int64
	// freed (capacity 1) is signalled when something comes back.
	freed chan struct{}
}

// NewBudget returns a budget of limit.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, freed: make(chan struct{}, 1)}
}

// Take takes n if it fits, or if nothing is taken (a unit larger than the whole budget goes
// alone), and returns the claim; nil when it does not fit now (wait for Freed, then try again).
func (b *Budget) Take(n int64) *Claim {
	for {
		used := b.used.Load()
		if used > 0 && used+n > b.limit {
			return nil
		}
		if b.used.CompareAndSwap(used, used+n) {
			return &Claim{b: b, n: n}
		}
	}
}

// Acquire takes n, waiting until it fits or ctx ends.
func (b *Budget) Acquire(ctx context.Context, n int64) (*Claim, error) {
	for {
		if c := b.Take(n); c != nil {
			if b.used.Load() < b.limit {
				// Returns coalesce into one signal: pass it on to the next waiter.
				b.signal()
			}
			return c, nil
		}
		select {
		case <-b.freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Freed is signalled (capacity 1, coalesced) when a claim is returned.
func (b *Budget) Freed() <-chan struct{} { return b.freed }

// InUse returns what is taken and not given back.
func (b *Budget) InUse() int64 { return b.used.Load() }

func (b *Budget) give(n int64) {
	b.used.Add(-n)
	b.signal()
}

func (b *Budget) signal() {
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// Claim is what was taken from a Budget for one unit. Return gives it back once; a nil claim
// does nothing.
type Claim struct {
	b    *Budget
	n    int64
	done atomic.Bool
}

// Return gives the claim back to its budget; later calls do nothing.
func (c *Claim) Return() {
	if c == nil || !c.done.CompareAndSwap(false, true) {
		return
	}
	c.b.give(c.n)
}

// Shrink keeps n of c's share (if less) and gives the rest back at once: a unit that turned out
// smaller than what was taken for it (a chunk of a few rows). Only whoever holds c alone, before
// handing it on, may call it; on a returned claim it does nothing.
func (c *Claim) Shrink(n int64) {
	if c == nil || n >= c.n || c.done.Load() {
		return
	}
	c.b.give(c.n - n)
	c.n = n
}

// Move returns a new claim over the same share and makes Return of c do nothing: the share moves
// on (a chunk read again keeps its memory slot, while the copy handed over before is dropped).
// If c was returned already, the new claim is too.
func (c *Claim) Move() *Claim {
	if c == nil {
		return nil
	}
	n := &Claim{b: c.b, n: c.n}
	if !c.done.CompareAndSwap(false, true) {
		n.done.Store(true)
	}
	return n
}

// GobEncode encodes nothing: a claim belongs to this process's budget and does not travel with
// a unit written to disk (held units, spilled by the replication stage, never carry one).
func (c *Claim) GobEncode() ([]byte, error) { return nil, nil }

// GobDecode decodes the nothing GobEncode wrote.
func (c *Claim) GobDecode([]byte) error { return nil }
