package watermark

import "github.com/tidemark/cdc/pkg/change"

// Confirmable returns the LSN up to which the replication slot may be confirmed: the lowest own
// position over the hydrated exports, counting for each the lowest of its durable (published)
// hydrated record, its in-flight hydrated records and its current position, so that an export
// that might be found hydrated after a crash always pins its WAL. An export whose last durable
// record is hydrated pins WAL even after it left that state in memory. A hydrating export pins
// nothing. With no such export it is the durable stream position. It never returns less than
// it returned before, and ok is false while nothing is known (no Advance, nothing restored).
func (t *Tracker) Confirmable() (lsn change.LSN, ok bool) {
	var c change.LSN
	have := false
	for _, x := range t.order {
		if p, pinned := t.pin(x); pinned && (!have || p < c) {
			c, have = p, true
		}
	}
	switch {
	case have:
	case t.hasSD:
		c = t.sd
	case t.hasConfirmed:
		c = t.confirmed
	default:
		return 0, false
	}
	if t.hasConfirmed && c < t.confirmed {
		c = t.confirmed
	}
	t.confirmed, t.hasConfirmed = c, true
	return c, true
}

// pin returns the position below which x needs the WAL kept, if any.
func (t *Tracker) pin(x *export) (change.LSN, bool) {
	var p change.LSN
	have := false
	lower := func(v change.LSN) {
		if !have || v < p {
			p, have = v, true
		}
	}
	if x.durable && x.durableStreams {
		// After a crash it resumes at its record's position or the checkpoint's, the higher.
		lower(max(x.durablePos, t.cpDurable))
	}
	if x.hasPendingHyd {
		lower(x.pendingHydMin)
	}
	if t.streams(x) && !x.restored {
		if pos, ok := t.position(x); ok {
			lower(pos)
		}
	}
	return p, have
}

// maxLSN returns the higher of a and b, nil counting as lowest; the result is a fresh pointer.
func maxLSN(a, b *change.LSN) *change.LSN {
	switch {
	case a == nil:
		return cloneLSN(b)
	case b == nil || *a >= *b:
		return cloneLSN(a)
	default:
		return cloneLSN(b)
	}
}

func cloneLSN(l *change.LSN) *change.LSN {
	if l == nil {
		return nil
	}
	v := *l
	return &v
}

func equalLSN(a, b *change.LSN) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
