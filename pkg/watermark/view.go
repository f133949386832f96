package watermark

import (
	"maps"

	"github.com/tidemark/cdc/pkg/change"
)

// View is what a reader of the watermark topic knows, record by record in offset order: each
// export's latest own record, with the watermark of a later quiet record applied where that
// record speaks for the export. pkg/wait, pkg/consumer, `cdc watermarks` and the restart all
// read the topic through it: it is the one implementation of the reading rules.
//
// The rules, for an export e:
//
//   - Own record: e's latest own record says e's state, offsets and watermark.
//   - Quiet record: a quiet record read after e's latest own record speaks for e when that own
//     record says hydrated and the quiet record does not list e as busy; e's watermark is then
//     the higher of the two.
//   - Checkpoint: it moves a restart's positions, not watermarks (it names no offsets), so the
//     view reads it and changes nothing.
//   - Never backwards: within one copy attempt (Record.Snapshot.Attempt), e's effective
//     watermark is the highest the rules above ever gave it. A quiet record that lists e as
//     busy, after one that spoke for e, leaves e's watermark where that one put it, not at its
//     own record's lower value: that record's offsets still cover every change below it, and
//     e's later own records have offsets at least as high. A new attempt (a re-copy) starts
//     again from its own records.
type View struct {
	seq   int
	own   map[change.ExportID]viewEntry
	quiet *Quiet
	qSeq  int
	busy  map[change.ExportID]bool
	peaks peaks
}

type viewEntry struct {
	rec Record
	seq int
}

// peak is the highest watermark an export had in one attempt.
type peak struct {
	attempt int
	w       change.LSN
}

// peaks keeps each export's peak: the never-backwards rule.
type peaks map[change.ExportID]peak

// attemptOf is the copy attempt a record belongs to (0 before any).
func attemptOf(r Record) int {
	if r.Snapshot == nil {
		return 0
	}
	return r.Snapshot.Attempt
}

// raise notes that e's effective watermark in attempt was w; a different attempt replaces
// the peak.
func (p peaks) raise(e change.ExportID, attempt int, w *change.LSN) {
	cur, ok := p[e]
	switch {
	case w == nil:
		if ok && cur.attempt != attempt {
			delete(p, e)
		}
	case !ok || cur.attempt != attempt || *w > cur.w:
		p[e] = peak{attempt: attempt, w: *w}
	}
}

// apply raises r's watermark to e's peak in r's attempt.
func (p peaks) apply(r *Record) {
	pk, ok := p[r.Export]
	if !ok || pk.attempt != attemptOf(*r) {
		return
	}
	if r.Watermark == nil || *r.Watermark < pk.w {
		w := pk.w
		r.Watermark = &w
		r.WatermarkLSN = lsnNumber(r.Watermark)
	}
}

// NewView returns an empty view.
func NewView() *View { return &View{own: make(map[change.ExportID]viewEntry), peaks: make(peaks)} }

// Add applies one value of the watermark topic: an export's record, the quiet record, or a
// checkpoint (ignored, as are tombstones). It returns the exports whose effective record the
// value changed (nil for a value that is none of these) and an error for a value that does not
// decode.
func (v *View) Add(value []byte) ([]change.ExportID, error) {
	if value == nil {
		return nil, nil
	}
	if _, ok, err := DecodeCheckpoint(value); ok {
		return nil, err
	}
	if q, ok, err := DecodeQuiet(value); ok {
		if err != nil {
			return nil, err
		}
		return v.addQuiet(q), nil
	}
	r, err := Decode(value)
	if err != nil {
		return nil, err
	}
	return v.addOwn(r), nil
}

// addQuiet applies a decoded quiet record and returns the exports it speaks for.
func (v *View) addQuiet(q Quiet) []change.ExportID {
	v.seq++
	v.quiet, v.qSeq = &q, v.seq
	v.busy = make(map[change.ExportID]bool, len(q.Busy))
	for _, e := range q.Busy {
		v.busy[e] = true
	}
	var changed []change.ExportID
	for e, ent := range v.own {
		if v.covers(e, ent) {
			changed = append(changed, e)
			v.peaks.raise(e, attemptOf(ent.rec), maxLSN(ent.rec.Watermark, q.Watermark))
		}
	}
	return changed
}

// addOwn applies an export's decoded record.
func (v *View) addOwn(r Record) []change.ExportID {
	v.seq++
	v.own[r.Export] = viewEntry{rec: r, seq: v.seq}
	v.peaks.raise(r.Export, attemptOf(r), r.Watermark)
	return []change.ExportID{r.Export}
}

// covers reports whether the quiet record speaks for the export of ent.
func (v *View) covers(e change.ExportID, ent viewEntry) bool {
	return v.quiet != nil && v.qSeq > ent.seq && ent.rec.State == StateHydrated && !v.busy[e]
}

// Get returns e's effective record: its latest own record, with the watermark, position and
// time of the latest quiet record when that speaks for e (each only where higher), and the
// watermark never below the highest e had in the same attempt.
func (v *View) Get(e change.ExportID) (Record, bool) {
	ent, ok := v.own[e]
	if !ok {
		return Record{}, false
	}
	r := ent.rec
	r.Offsets = maps.Clone(r.Offsets)
	if v.covers(e, ent) {
		r.Watermark = maxLSN(r.Watermark, v.quiet.Watermark)
		r.WatermarkLSN = lsnNumber(r.Watermark)
		r.Position = max(r.Position, v.quiet.Position)
		r.Time, r.Mode = v.quiet.Time, v.quiet.Mode
	}
	v.peaks.apply(&r)
	return r, true
}

// All returns every export's effective record.
func (v *View) All() map[change.ExportID]Record {
	out := make(map[change.ExportID]Record, len(v.own))
	for e := range v.own {
		out[e], _ = v.Get(e)
	}
	return out
}
