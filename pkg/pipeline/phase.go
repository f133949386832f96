package pipeline

import (
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// phase is where an export is in its life. It is the one state of an export: the owner keeps
// it, the replication stage routes as the owner's commands say, and the state its watermark
// records show follows from it (phase.state).
//
//	             ┌── chunked ──► chunking ───────────────────────────────┐
//	published ───┤                                                       ├──► hydrated
//	             └── copy ─────► holding ─► copying ─► releasing ────────┘
//	any live phase ── left the publication ──► removing ──► removed
//	failed ── left the publication ──► removing (failed) ──► removed
//	any phase but failed or removed ── permanent error ──► failed
//
// A rewrite during a copy, or a copy request that failed, goes back to holding; a re-copy on
// demand takes a hydrated export back to chunking (or holding). A removed export added to the
// publication again starts over at holding once its removal is recorded.
//
// The phase is the only lifecycle state of an export. The watermark tracker keeps none: it
// is told phase.state at every transition (owner.enter), and keeps only history (positions, the snapshot
// attempt, its records). The transitions below are the only ways into the phases that change
// what the records say; each decides whether the event applies in e's phase, and tells the
// tracker while e is still in the phase it leaves.
type phase uint8

const (
	// phaseHolding: copy strategy; changes are held, a snapshot is requested.
	phaseHolding phase = iota + 1
	// phaseCopying: copy strategy; the snapshot began at its consistent point.
	phaseCopying
	// phaseReleasing: copy strategy; the copy is durable: reconciled if needed, then its held
	// changes are released and the replication stage reports it hydrated.
	phaseReleasing
	// phaseChunking: chunked copy; changes flow directly, chunks merge with them.
	phaseChunking
	phaseHydrated
	// phaseRemoving: left the publication while it was being copied; routed until the stream
	// passes the removal. phaseRemovingHydrated: the same for a hydrated export.
	phaseRemoving
	phaseRemoved
	phaseFailed
	phaseRemovingHydrated
	// phaseRemovingFailed: a failed export left the publication; its records still say failed.
	phaseRemovingFailed
)

var phaseNames = [...]string{"", "holding", "copying", "releasing", "chunking", "hydrated", "removing", "removed", "failed", "removing", "removing"}

func (p phase) String() string { return phaseNames[p] }

// known reports whether an export in phase p is routed: published and not re-added by a poll.
func (p phase) known() bool {
	return p != 0 && p != phaseRemoving && p != phaseRemovingHydrated && p != phaseRemovingFailed && p != phaseRemoved
}

// state is what the export's watermark records say in phase p: a copy in any form is
// hydrating, and so is its removal until the stream passed it; then it is removed. "" for no
// phase (an export restored from the watermark topic that was not published again).
func (p phase) state() watermark.State {
	switch p {
	case phaseHolding, phaseCopying, phaseReleasing, phaseChunking, phaseRemoving:
		return watermark.StateHydrating
	case phaseHydrated, phaseRemovingHydrated:
		return watermark.StateHydrated
	case phaseRemoved:
		return watermark.StateRemoved
	case phaseFailed, phaseRemovingFailed:
		return watermark.StateFailed
	}
	return ""
}

// enter moves e to phase p and tells the tracker the state p gives (watermark.Tracker.SetState):
// the one way the phase changes. A transition calls the tracker's transition method first, while
// e is still in the phase it leaves.
func (o *owner) enter(e change.ExportID, p phase) {
	if o.phases[e] == phaseChunking {
		o.chunking--
	}
	if p == phaseChunking {
		o.chunking++
	}
	o.phases[e] = p
	o.tracker.SetState(e, p.state())
}

// takeUp gives e, restored from the watermark topic following the stream, the phase its records
// left it in: chunking, or hydrated. Until then the tracker reads e's state from those records.
func (o *owner) takeUp(e change.ExportID, chunked bool) {
	if chunked {
		o.enter(e, phaseChunking)
	} else {
		o.enter(e, phaseHydrated)
	}
}

// setPhase moves e to p where that does not change what e's records say (removing, releasing).
func (o *owner) setPhase(e change.ExportID, p phase) {
	o.enter(e, p)
}

// toHolding: e's changes are held for a new copy (new to the publication, added again, copied
// again, or a copy that starts over). Any phase.
func (o *owner) toHolding(e change.ExportID) {
	o.tracker.Holding(e)
	o.enter(e, phaseHolding)
}

// toCopying: e's snapshot began at consistent point c (any phase: the snapshot stage copies
// what it was asked to); returns the attempt.
func (o *owner) toCopying(e change.ExportID, topic string, c change.LSN, estimatedRows int64, startOffsets map[int32]int64, now time.Time) int {
	attempt := o.tracker.StartHydration(e, topic, c, estimatedRows, startOffsets, now)
	o.enter(e, phaseCopying)
	return attempt
}

// toChunking: a chunked copy of e starts (new, or hydrated and copied again); returns the
// attempt.
func (o *owner) toChunking(e change.ExportID, topic string, startOffsets map[int32]int64, now time.Time) int {
	attempt := o.tracker.StartChunked(e, topic, 0, startOffsets, now)
	o.enter(e, phaseChunking)
	return attempt
}

// toHydrated: e's copy and held changes are durable up to at; for a hydrated export, its
// position rises. One that left the publication meanwhile stays on its way out, hydrated. A
// removed or failed export, or one not taken up, stays where it is.
func (o *owner) toHydrated(e change.ExportID, at change.LSN) bool {
	var next phase
	switch o.phases[e] {
	case phaseHolding, phaseCopying, phaseReleasing, phaseChunking, phaseHydrated:
		next = phaseHydrated
	case phaseRemoving, phaseRemovingHydrated:
		next = phaseRemovingHydrated
	default:
		return false
	}
	o.tracker.Hydrated(e, at)
	o.enter(e, next)
	return true
}

// toRemoved: the stream passed e's removal at (or e left the publication while stopped). Once.
func (o *owner) toRemoved(e change.ExportID, at change.LSN) bool {
	if o.phases[e] == phaseRemoved {
		return false
	}
	o.tracker.Removed(e, at)
	o.enter(e, phaseRemoved)
	return true
}

// toFailed: e stopped on a permanent error. Once, and never after its removal.
func (o *owner) toFailed(e change.ExportID, reason string) bool {
	switch o.phases[e] {
	case phaseFailed, phaseRemovingFailed, phaseRemoved:
		return false
	}
	o.tracker.Failed(e, reason)
	o.enter(e, phaseFailed)
	return true
}
