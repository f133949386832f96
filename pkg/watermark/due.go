package watermark

import (
	"maps"
	"math"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// Due returns the records to publish now, at most one per export:
//
//   - at once for every state transition since the export's last record (snapshot start,
//     snapshot copied, hydrated, removed, failed);
//   - for a live export whose watermark or own position moved since its last record, unless its
//     last record is younger than Interval/4 (coalescing);
//   - a heartbeat for a live export whose last record is at least Interval old.
//
// A hydrated export whose topic's offsets are those of its last record (a quiet export: nothing
// was published for it since) gets none of these: the quiet record (Quiet, called right after
// Due) carries its watermark, so records per second do not grow with the number of quiet
// tables.
//
// A removed or failed export gets its final record and then none until it is hydrated again.
// offsets(topic) returns the current end offset per partition of topic: what a record's
// Offsets says its watermark covers. Due reads the maps it returns and keeps copies; nil
// offsets is allowed.
//
// The records are in flight from now on: Published reports them durable. Their watermarks count
// as published at once (a later record never carries less).
func (t *Tracker) Due(now time.Time, offsets func(topic string) map[int32]int64) []Record {
	g := t.global()
	var out []Record
	for _, x := range t.order {
		x.quiet = false
		if x.restored {
			continue
		}
		// Read only: what a record keeps is copied below (most exports are quiet, and a copy
		// per export and call made garbage in proportion to the tables).
		var offs map[int32]int64
		if offsets != nil && x.topic != "" {
			offs = offsets(x.topic)
		}
		st := t.state(x)
		if st == StateHydrated && !x.owed && x.hasRecord && x.lastState == StateHydrated && maps.Equal(x.lastOffsets, offs) {
			// Nothing in its topic beyond its last record: the quiet record speaks for it.
			x.quiet = true
			continue
		}
		w := t.watermark(x, g)
		pos, _ := t.position(x)
		if !t.due(x, st, w, pos, now) {
			continue
		}
		r := Record{
			Version:      Version,
			Export:       x.id,
			Topic:        x.topic,
			State:        st,
			Mode:         t.mode,
			Watermark:    cloneLSN(w),
			WatermarkLSN: lsnNumber(w),
			Position:     pos,
			Offsets:      maps.Clone(offs),
			Snapshot:     x.snap.clone(),
			Time:         now.UTC(),
		}
		if st == StateHydrating && r.Snapshot != nil {
			r.Snapshot.RowsPerSecond, r.Snapshot.ETASeconds = t.rate(x, now)
		}
		if st == StateFailed {
			r.Error = x.err
		}
		out = append(out, r)

		x.published = cloneLSN(w)
		x.hasRecord, x.lastW, x.lastPos, x.lastAt = true, cloneLSN(w), pos, now
		x.lastState, x.lastOffsets = st, maps.Clone(offs)
		x.owed = false
		if !x.hasPending {
			t.pending = append(t.pending, x)
		}
		follows := streams(st, x.snap)
		x.hasPending, x.pendingStreams, x.pendingPos = true, follows, pos
		if follows && (!x.hasPendingHyd || pos < x.pendingHydMin) {
			x.hasPendingHyd, x.pendingHydMin = true, pos
		}
	}
	return out
}

// due decides whether x gets a record now, given its state st, watermark w and position pos.
func (t *Tracker) due(x *export, st State, w *change.LSN, pos change.LSN, now time.Time) bool {
	if x.owed {
		return true
	}
	if !st.live() {
		return false
	}
	if !x.hasRecord {
		return true
	}
	age := now.Sub(x.lastAt)
	if age < 0 || age >= t.interval {
		return true // heartbeat (or a clock that went back: do not go silent)
	}
	moved := !equalLSN(w, x.lastW) || pos != x.lastPos
	return moved && age >= t.interval/4
}

// Published reports that every record returned by Due and every checkpoint returned by
// Checkpoint so far are durable in Kafka. Only now do their positions count for Confirmable.
func (t *Tracker) Published() {
	for _, x := range t.pending {
		x.durable, x.durableStreams, x.durablePos = true, x.pendingStreams, x.pendingPos
		x.hasPending, x.hasPendingHyd = false, false
	}
	t.pending = t.pending[:0]
	if t.hasCPPending {
		t.cpDurable = max(t.cpDurable, t.cpPending)
		t.hasCPPending = false
	}
}

// watermark computes what x's record says now: the mode's value, but never less than x
// published before (nil: no watermark).
func (t *Tracker) watermark(x *export, g *change.LSN) *change.LSN {
	var w *change.LSN
	pos, hasPos := t.position(x)
	st := t.state(x)
	switch {
	case st == StateHydrating:
		// No watermark while hydrating, in either mode: its topic is not complete up to
		// anything yet (an earlier one is kept below, never regressing).
	case t.mode == ModeGlobal && st.live():
		w = g
	case t.mode == ModeGlobal:
		// A removed or failed export no longer counts for the global watermark; its final
		// record may still advance to it, but not past its own position.
		if g != nil && hasPos {
			v := min(*g, pos)
			w = &v
		}
	case hasPos:
		w = &pos
	}
	return maxLSN(x.published, w)
}

// global computes the global watermark (global mode; nil otherwise or while unknown): the lowest
// own position over the live exports, where a hydrating export counts as lowest of all, so the
// watermark stays where it was while any export hydrates. It never moves backwards.
func (t *Tracker) global() *change.LSN {
	if t.mode != ModeGlobal {
		return nil
	}
	var lowest change.LSN
	hydrated := false
	for _, x := range t.order {
		if x.restored {
			continue
		}
		switch t.state(x) {
		case StateHydrating:
			return t.globalW
		case StateHydrated:
			if p, _ := t.position(x); !hydrated || p < lowest {
				lowest, hydrated = p, true
			}
		}
	}
	if hydrated {
		t.globalW = maxLSN(t.globalW, &lowest)
	}
	return t.globalW
}

// rate returns the copy rate of x's current attempt in this process (rows per second, 0 while
// unknown) and the estimated seconds left (nil while unknown).
func (t *Tracker) rate(x *export, now time.Time) (float64, *float64) {
	elapsed := now.Sub(x.lifeStart).Seconds()
	if x.lifeStart.IsZero() || elapsed < 0.5 || x.lifeRows == 0 {
		return 0, nil
	}
	r := float64(x.lifeRows) / elapsed
	left := max(float64(x.snap.RowsEstimated-x.snap.RowsCopied), 0)
	if x.snap.FinishedAt != nil {
		left = 0
	}
	eta := math.Round(left/r*10) / 10
	return math.Round(r), &eta
}
