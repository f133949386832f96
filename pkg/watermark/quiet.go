package watermark

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// QuietKey is the key of the quiet record in the watermark topic. It cannot be an export's
// key: those are schema.table.
const QuietKey = "__quiet"

// quietKind tells a quiet record's value from the other values of the watermark topic.
const quietKind = "quiet"

// Quiet is the quiet record: one record in the watermark topic, under QuietKey, that carries the
// watermark of every quiet export at once, so that the records written per second do not grow
// with the number of tables that see no changes.
//
// It says: every export whose latest own record (read before this one) is hydrated, and which
// is not listed in Busy, has watermark Watermark, with the offsets of that own record. A reader
// takes, for such an export, the higher of its own record's watermark and the quiet record's;
// View does this. A quiet record read before an export's latest own record says nothing about
// that export (its own record is newer and at least as high).
type Quiet struct {
	Version int    `json:"version"`
	Kind    string `json:"kind"`
	Mode    Mode   `json:"mode"`
	// Watermark is null while the exports it speaks for have none (global mode, before the
	// first global watermark).
	Watermark *change.LSN `json:"watermark"`
	// WatermarkLSN is Watermark as a number.
	WatermarkLSN *uint64 `json:"watermark_lsn"`
	// Position is the lowest own position of the exports it speaks for (they follow the
	// stream, so in practice the durable stream position).
	Position change.LSN `json:"position"`
	// Busy are the hydrated exports the record does not speak for: their topics hold records
	// that their own latest record does not cover yet (it follows within an interval).
	Busy []change.ExportID `json:"busy"`
	Time time.Time         `json:"ts"`
}

// EncodeQuiet renders q as JSON (Version, Kind and WatermarkLSN filled in).
func EncodeQuiet(q Quiet) ([]byte, error) {
	q.Version, q.Kind, q.WatermarkLSN = Version, quietKind, lsnNumber(q.Watermark)
	if q.Busy == nil {
		q.Busy = []change.ExportID{}
	}
	b, err := json.Marshal(q)
	if err != nil {
		return nil, fmt.Errorf("encode quiet record: %w", err)
	}
	return b, nil
}

// DecodeQuiet parses b if it is a quiet record; ok is false for any other value.
func DecodeQuiet(b []byte) (q Quiet, ok bool, err error) {
	if valueKind(b) != quietKind {
		return Quiet{}, false, nil
	}
	q, err = decodeQuiet(b)
	return q, true, err
}

// decodeQuiet parses b, a value of kind quietKind.
func decodeQuiet(b []byte) (q Quiet, err error) {
	if err := json.Unmarshal(b, &q); err != nil {
		return Quiet{}, fmt.Errorf("decode quiet record: %w", err)
	}
	if err := checkVersion("quiet record", q.Version, Version); err != nil {
		return Quiet{}, err
	}
	switch {
	case (q.Watermark == nil) != (q.WatermarkLSN == nil) || q.Watermark != nil && uint64(*q.Watermark) != *q.WatermarkLSN:
		return Quiet{}, errors.New("decode quiet record: watermark and watermark_lsn disagree")
	}
	return q, nil
}

// Quiet returns the quiet record to publish now, if one is due. Call it right after Due, with
// whose offsets it decides which exports are quiet. The record carries the lowest watermark and
// position of the quiet exports (in global mode the watermark is the global one) and lists the
// other hydrated exports as busy. For each quiet export it is due as a record of its own would
// be: when its watermark or position moved since a reader last heard of it (at most once per
// Interval/4), and at least once per Interval. Like Due's records it is in flight until
// Published: then it is the quiet exports' durable record, with its position.
func (t *Tracker) Quiet(now time.Time) (Quiet, bool) {
	g := t.global()
	var w *change.LSN
	var pos change.LSN
	var busy []change.ExportID
	due, any := false, false
	for _, x := range t.order {
		if x.restored || t.state(x) != StateHydrated {
			continue
		}
		if !x.quiet {
			busy = append(busy, x.id)
			continue
		}
		xw := t.watermark(x, g)
		p, _ := t.position(x)
		if !any || p < pos {
			pos = p
		}
		if !any || w != nil && (xw == nil || *xw < *w) {
			w = xw // nil is lowest
		}
		any = true
		age := now.Sub(x.lastAt)
		moved := !equalLSN(xw, x.lastW) || p != x.lastPos
		due = due || age < 0 || age >= t.interval || moved && age >= t.interval/4
	}
	if !any || !due {
		return Quiet{}, false
	}
	for _, x := range t.order {
		if !x.quiet || x.restored || t.state(x) != StateHydrated {
			continue
		}
		// What a reader now knows of x: the higher of its own record's and this record's.
		x.published = maxLSN(x.published, w)
		x.lastW, x.lastPos, x.lastAt = maxLSN(x.lastW, w), max(x.lastPos, pos), now
		if !x.hasPending {
			t.pending = append(t.pending, x)
		}
		x.hasPending, x.pendingStreams, x.pendingPos = true, true, pos
		if !x.hasPendingHyd || pos < x.pendingHydMin {
			x.hasPendingHyd, x.pendingHydMin = true, pos
		}
	}
	slices.SortFunc(busy, func(a, b change.ExportID) int {
		if c := compareStrings(a.Schema, b.Schema); c != 0 {
			return c
		}
		return compareStrings(a.Table, b.Table)
	})
	return Quiet{Mode: t.mode, Watermark: cloneLSN(w), Position: pos, Busy: busy, Time: now.UTC()}, true
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
