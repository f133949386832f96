package watermark

import (
	"maps"
	"slices"

	"github.com/tidemark/cdc/pkg/change"
)

// TopicReader folds the values of the watermark topic, read in offset order per partition, into
// what a restart needs: each export's effective record (View's rules) and the last checkpoint.
// It keeps only what can still matter, per partition: each export's latest own record, the
// latest quiet record and the latest checkpoint, so its memory follows the number of exports,
// not the topic's history (the active segment is never compacted, and a topic whose cleaner is
// behind holds many records per key).
//
// The result is the one of reading every value of partition 0, then of partition 1, and so on,
// through one View (the watermark topic has one partition; a topic made by hand may have more):
// View's answer depends only on each export's latest own record, the latest quiet record and
// their order, and those are what the fold keeps. Every value is decoded as it arrives, so a
// value that does not decode is an error even when a later one supersedes it, as before.
type TopicReader struct {
	parts map[int32]*partFold
	// bound, when bounded, is the highest LSN a value may carry (Bound).
	bound   change.LSN
	bounded bool
}

// partFold is what one partition's values left: the latest of each kind, with its position in
// the partition.
type partFold struct {
	seq   int
	own   map[change.ExportID]seqRecord
	quiet *Quiet
	qSeq  int
	cp    *Checkpoint
	// peaks: View's never-backwards rule, applied as the values are folded (the fold drops
	// the quiet records that set them).
	peaks peaks
}

type seqRecord struct {
	rec Record
	seq int
}

// NewTopicReader returns an empty reader.
func NewTopicReader() *TopicReader { return &TopicReader{parts: make(map[int32]*partFold)} }

// Add folds the next value of partition in (tombstones, nil values, are skipped). An error means
// the value is not a watermark record, a quiet record or a checkpoint this build reads, or (a
// *PastBoundError) that it carries an LSN past the bound; such a value is not folded.
func (t *TopicReader) Add(partition int32, value []byte) error {
	if value == nil {
		return nil
	}
	p := t.parts[partition]
	if p == nil {
		p = &partFold{own: make(map[change.ExportID]seqRecord), peaks: make(peaks)}
		t.parts[partition] = p
	}
	switch valueKind(value) {
	case checkpointKind:
		cp, err := decodeCheckpoint(value)
		if err != nil {
			return err
		}
		if err := t.check(checkpointLSNs(cp)...); err != nil {
			return err
		}
		p.cp = &cp
		return nil
	case quietKind:
		q, err := decodeQuiet(value)
		if err != nil {
			return err
		}
		if err := t.check(quietLSNs(q)...); err != nil {
			return err
		}
		p.seq++
		p.quiet, p.qSeq = &q, p.seq
		busy := make(map[change.ExportID]bool, len(q.Busy))
		for _, e := range q.Busy {
			busy[e] = true
		}
		for e, r := range p.own {
			if r.rec.State == StateHydrated && !busy[e] {
				p.peaks.raise(e, attemptOf(r.rec), maxLSN(r.rec.Watermark, q.Watermark))
			}
		}
		return nil
	}
	r, err := Decode(value)
	if err != nil {
		return err
	}
	if err := t.check(recordLSNs(r)...); err != nil {
		return err
	}
	p.seq++
	p.own[r.Export] = seqRecord{rec: r, seq: p.seq}
	p.peaks.raise(r.Export, attemptOf(r), r.Watermark)
	return nil
}

// Retained is the number of decoded values the reader holds: at most, per partition, one per
// export plus a quiet record and a checkpoint.
func (t *TopicReader) Retained() int {
	n := 0
	for _, p := range t.parts {
		n += len(p.own)
		if p.quiet != nil {
			n++
		}
		if p.cp != nil {
			n++
		}
	}
	return n
}

// Result returns each export's effective record (View.Get), ordered by the position of its
// latest own record, and the last checkpoint (nil if there is none).
func (t *TopicReader) Result() ([]Record, *Checkpoint) {
	view := NewView()
	var cp *Checkpoint
	// last: each export's latest own record, as a position in the replay.
	last := make(map[change.ExportID]int)
	pos := 0
	for _, pn := range slices.Sorted(maps.Keys(t.parts)) {
		p := t.parts[pn]
		if p.cp != nil {
			cp = p.cp
		}
		// Replay what the partition left in its order: the quiet record goes between the own
		// records read before and after it.
		recs := slices.SortedFunc(maps.Values(p.own), func(a, b seqRecord) int { return a.seq - b.seq })
		quietDone := p.quiet == nil
		for _, r := range recs {
			if !quietDone && p.qSeq < r.seq {
				view.addQuiet(*p.quiet)
				quietDone = true
			}
			view.addOwn(r.rec)
			pos++
			last[r.rec.Export] = pos
		}
		if !quietDone {
			view.addQuiet(*p.quiet)
		}
		for e, pk := range p.peaks {
			w := pk.w
			view.peaks.raise(e, pk.attempt, &w)
		}
	}
	exports := slices.SortedFunc(maps.Keys(last), func(a, b change.ExportID) int { return last[a] - last[b] })
	out := make([]Record, 0, len(exports))
	for _, e := range exports {
		r, _ := view.Get(e)
		out = append(out, r)
	}
	return out, cp
}

// DecodeTopic decodes the values of the watermark topic in offset order (one partition): each
// export's effective record, ordered by the offset of its latest own record, and the last
// checkpoint (nil if there is none). Tombstones (nil values) are skipped. An export's record
// carries the watermark of a later quiet record that speaks for it when that is higher (see
// View), so the records say what readers were told. It is TopicReader over values.
func DecodeTopic(values [][]byte) ([]Record, *Checkpoint, error) {
	t := NewTopicReader()
	for _, v := range values {
		if err := t.Add(0, v); err != nil {
			return nil, nil, err
		}
	}
	recs, cp := t.Result()
	return recs, cp, nil
}
