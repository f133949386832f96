package watermark

import (
	"fmt"

	"github.com/tidemark/cdc/pkg/change"
)

// PastBoundError is a value of the watermark topic that carries an LSN past the bound the
// reader checks it against (TopicReader.Bound): at a restart, the end of the WAL the server has
// written. cdc publishes only positions of WAL the server sent it, so no value it wrote can be
// past that end; such a value was written by someone else, or for another database.
type PastBoundError struct {
	// Field names the value and the field: "the quiet record's watermark",
	// "public.t's position", "the checkpoint's position", ...
	Field string
	LSN   change.LSN
	Bound change.LSN
}

func (e *PastBoundError) Error() string {
	return fmt.Sprintf("%s %s is past %s", e.Field, e.LSN, e.Bound)
}

// Bound makes Add refuse, with a *PastBoundError, every later value that carries an LSN past
// bound: an own record's watermark, position or snapshot consistent point, a quiet record's
// watermark or position, a checkpoint's position or partly published transaction. A refused
// value changes nothing, so the caller may raise the bound and add it again. Every value is
// checked as it is read, also one that a later value supersedes: the never-backwards rule keeps
// the highest watermark an export ever had, so a superseded value can still be restored.
func (t *TopicReader) Bound(bound change.LSN) { t.bound, t.bounded = bound, true }

// lsnField is one LSN that a value carries, and what it is.
type lsnField struct {
	field string
	lsn   change.LSN
}

// check returns a *PastBoundError for the first of fields past the reader's bound.
func (t *TopicReader) check(fields ...lsnField) error {
	if !t.bounded {
		return nil
	}
	for _, f := range fields {
		if f.lsn > t.bound {
			return &PastBoundError{Field: f.field, LSN: f.lsn, Bound: t.bound}
		}
	}
	return nil
}

// recordLSNs are the LSNs of an export's own record.
func recordLSNs(r Record) []lsnField {
	var out []lsnField
	name := r.Export.String() + "'s "
	if r.Watermark != nil {
		out = append(out, lsnField{name + "watermark", *r.Watermark})
	}
	out = append(out, lsnField{name + "position", r.Position})
	if r.Snapshot != nil {
		out = append(out, lsnField{name + "snapshot consistent point", r.Snapshot.ConsistentPoint})
	}
	return out
}

// quietLSNs are the LSNs of a quiet record.
func quietLSNs(q Quiet) []lsnField {
	var out []lsnField
	if q.Watermark != nil {
		out = append(out, lsnField{"the quiet record's watermark", *q.Watermark})
	}
	return append(out, lsnField{"the quiet record's position", q.Position})
}

// checkpointLSNs are the LSNs of a checkpoint.
func checkpointLSNs(cp Checkpoint) []lsnField {
	out := []lsnField{{"the checkpoint's position", cp.Position}}
	if cp.Partial != nil {
		out = append(out, lsnField{"the checkpoint's partly published transaction", cp.Partial.Commit})
	}
	return out
}
