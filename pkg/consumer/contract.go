package consumer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// The watermark topic is a control channel: its records decide which tables a consumer applies,
// from which topic, up to which offsets and LSN. Only cdc should be able to write it (Kafka
// ACLs, docs/production.md); the reader also refuses a record that no cdc could have written,
// with an error that names the record, instead of waiting or skipping in silence.

// ErrContract is wrapped by the error of a watermark record that breaks the contract of the
// watermark topic (docs/records.md): no retry fixes it.
var ErrContract = errors.New("the watermark topic holds a record no cdc writes")

// MaxLSN is the highest LSN a record may carry: 2^62 bytes of WAL, 146 years of writing 1 GB/s.
// PostgreSQL starts a cluster's WAL near 0, so an LSN above it was not read from a server.
const MaxLSN = change.LSN(1) << 62

// seenExport is what the reader knows of an export from its own records read so far: the
// highest copy attempt, and the end offsets its records of that attempt covered.
type seenExport struct {
	attempt int
	topic   string
	offsets map[int32]int64
}

// SystemSchema reports whether schema is one of PostgreSQL's own (pg_catalog,
// information_schema, pg_toast, any pg_*): no publication can hold its tables, so no cdc
// writes records of them, and no consumer may apply them.
func SystemSchema(schema string) bool {
	return schema == "information_schema" || strings.HasPrefix(schema, "pg_")
}

// checkValue refuses a watermark value that breaks the contract; where names it. Values that
// do not decode are left to the view, which reports them.
func (s *state) checkValue(value []byte, where string) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", where, fmt.Sprintf(format, args...), ErrContract)
	}
	lsn := func(what string, l *change.LSN) error {
		if l != nil && *l > MaxLSN {
			return fail("%s %s is beyond any server's WAL (above %s)", what, *l, MaxLSN)
		}
		return nil
	}
	if cp, ok, err := watermark.DecodeCheckpoint(value); ok {
		if err != nil {
			return nil
		}
		return lsn("checkpoint position", &cp.Position)
	}
	if q, ok, err := watermark.DecodeQuiet(value); ok {
		if err != nil {
			return nil
		}
		if err := lsn("quiet record's watermark", q.Watermark); err != nil {
			return err
		}
		return lsn("quiet record's position", &q.Position)
	}
	r, err := watermark.Decode(value)
	if err != nil {
		return nil
	}
	e := r.Export
	if s.chosen != nil && !s.chosen[e] || s.accept != nil && !s.accept(e) {
		return nil
	}
	if SystemSchema(e.Schema) {
		return fail("export %s is in a system schema, which no publication holds", e)
	}
	if s.topicOf != nil {
		if want := s.topicOf(e); r.Topic != want {
			return fail("export %s names topic %q, not %q, the topic cdc derives from the prefix", e, r.Topic, want)
		}
	}
	if err := lsn("watermark of "+e.String(), r.Watermark); err != nil {
		return err
	}
	if err := lsn("position of "+e.String(), &r.Position); err != nil {
		return err
	}
	for p, o := range r.Offsets {
		if p < 0 || o < 0 {
			return fail("export %s: offset %d of partition %d", e, o, p)
		}
	}
	attempt := attemptOf(r)
	if sn := r.Snapshot; sn != nil {
		if err := lsn("consistent point of "+e.String(), &sn.ConsistentPoint); err != nil {
			return err
		}
		for p, start := range sn.StartOffsets {
			if p < 0 || start < 0 {
				return fail("export %s: start offset %d of partition %d", e, start, p)
			}
			if end, ok := r.Offsets[p]; ok && r.State == watermark.StateHydrated && end < start {
				return fail("copy attempt %d of %s goes backwards in partition %d: it starts at offset %d and ends at %d", attempt, e, p, start, end)
			}
			if from, ok := sn.ReconcileFrom[p]; ok && from > start {
				return fail("copy attempt %d of %s reconciles partition %d from offset %d, after its start %d", attempt, e, p, from, start)
			}
		}
	}
	if r.Snapshot == nil {
		return nil
	}
	seen, ok := s.seen[e]
	switch {
	case ok && attempt < seen.attempt:
		return fail("export %s: copy attempt %d after attempt %d (attempts only grow)", e, attempt, seen.attempt)
	case ok && attempt == seen.attempt && r.Topic == seen.topic:
		for p, o := range r.Offsets {
			if before, ok := seen.offsets[p]; ok && o < before {
				return fail("export %s, attempt %d: partition %d's offset went back from %d to %d", e, attempt, p, before, o)
			}
		}
	default:
		seen = seenExport{attempt: attempt, topic: r.Topic, offsets: map[int32]int64{}}
	}
	for p, o := range r.Offsets {
		seen.offsets[p] = max(seen.offsets[p], o)
	}
	if s.seen == nil {
		s.seen = map[change.ExportID]seenExport{}
	}
	s.seen[e] = seen
	return nil
}
