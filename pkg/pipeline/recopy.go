package pipeline

import (
	"errors"
	"fmt"

	"github.com/tidemark/cdc/pkg/change"
)

// A re-copy on demand (POST /exports/{table}/resnapshot) is answered once it is durable: once
// the watermark record that announces the new copy is written to Kafka (committed in
// exactly-once mode, acknowledged in at-least-once mode). That record is the one the copy's
// start writes anyway: a chunked copy's first record (state hydrating, the new attempt, no
// chunk done), or, for the copy strategy, the record that says the table's changes are held
// for a new snapshot (state hydrating). A cdc that restarts after it reads the table as
// hydrating and copies it (a chunked copy from its first chunk, a copy with a new snapshot),
// so an answered request survives a crash at any moment; consumers read it as the start of a
// new copy, as before.
//
// The owner never waits for it: it keeps the request's reply channel beside the export
// (recopies) until the poll starts the copy (recopyStarted), hands it on with the records of
// the batch that carries the announcement (recopiesDue), and answers once that batch is
// committed (recopiesCommitted). The caller bounds the wait (Pipeline.Resnapshot).

// Errors of resnapshot.
var (
	errUnknownExport = errors.New("not an exported table")
	errNotHydrated   = errors.New("not hydrated: only a hydrated table can be copied again")
	errNotStarted    = errors.New("the re-copy did not start")
)

// recopyWait is the re-copies asked for one export whose announcement is not durable yet.
type recopyWait struct {
	// started: the copy began; the record that announces it is owed.
	started bool
	// asked is owner.pollSeq when it was first asked for: a poll taken in meanwhile (whose
	// number it is) did not see it.
	asked uint64
	// replies take nil once that record is durable, or why the copy will not start.
	replies []chan<- error
}

// resnapshot copies e again (a consumer lost its state): its rows are published again, in
// chunks when e can take them, otherwise with a snapshot that reconciles as after a re-add. e
// must be hydrated. The copy starts at the next poll (woken now); durable (capacity 1) gets
// the answer once the record announcing it is durable. An error is the answer at once, and
// durable gets nothing.
func (o *owner) resnapshot(e change.ExportID, durable chan<- error) error {
	p := o.phases[e]
	switch {
	case !p.known():
		return fmt.Errorf("%s: %w", e, errUnknownExport)
	case p != phaseHydrated:
		return fmt.Errorf("%s is %s: %w", e, p, errNotHydrated)
	}
	o.pending = append(o.pending, e)
	w := o.recopies[e]
	if w == nil {
		w = &recopyWait{asked: o.pollSeq}
		o.recopies[e] = w
	}
	w.replies = append(w.replies, durable)
	o.wakePoll()
	return nil
}

// recopyStarted: a poll started a copy of e; a re-copy asked for it waits for the record that
// says so.
func (o *owner) recopyStarted(e change.ExportID) {
	if w := o.recopies[e]; w != nil {
		w.started = true
	}
}

// recopiesPolled answers, after poll seq went through, the re-copies asked before it that it
// did not start: their table left the publication, or was removed, meanwhile. After a failed
// poll they wait for the next one, and so do those asked while it was being taken in.
func (o *owner) recopiesPolled(err error, seq uint64) {
	if err != nil {
		return
	}
	for _, e := range sortedExports(o.recopies) {
		w := o.recopies[e]
		if w.started || w.asked >= seq {
			continue
		}
		for _, r := range w.replies {
			r <- fmt.Errorf("%s is %s: %w", e, o.phases[e], errNotStarted)
		}
		delete(o.recopies, e)
	}
}

// recopiesDue hands on the re-copies whose announcement is among the records of the batch
// (announced: the exports whose record the batch carries): they are answered when the batch
// commits.
func (o *owner) recopiesDue(announced map[change.ExportID]bool) {
	for e, w := range o.recopies {
		if w.started && announced[e] {
			o.recopyFlight = append(o.recopyFlight, w.replies...)
			delete(o.recopies, e)
		}
	}
}

// recopiesCommitted answers the re-copies whose announcement just became durable.
func (o *owner) recopiesCommitted() {
	for _, r := range o.recopyFlight {
		r <- nil
	}
	o.recopyFlight = nil
}
