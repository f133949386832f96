package pipeline

import "github.com/tidemark/cdc/pkg/watermark"

// phase is where an export is in its life. It is the one state of an export: the owner keeps
// it, the replication stage routes as the owner's commands say, and the state its watermark
// records show follows from it (phase.state).
//
//	             ┌── chunked ──► chunking ───────────────────────────────┐
//	published ───┤                                                       ├──► hydrated
//	             └── copy ─────► holding ─► copying ─► releasing ────────┘
//	any live phase ── left the publication ──► removing ──► removed
//	any live phase ── permanent error ──► failed
//
// A rewrite during a copy, or a copy request that failed, goes back to holding; a re-copy on
// demand takes a hydrated export back to chunking (or holding).
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
)

var phaseNames = [...]string{"", "holding", "copying", "releasing", "chunking", "hydrated", "removing", "removed", "failed", "removing"}

func (p phase) String() string { return phaseNames[p] }

// known reports whether an export in phase p is routed: published and not re-added by a poll.
func (p phase) known() bool {
	return p != 0 && p != phaseRemoving && p != phaseRemovingHydrated && p != phaseRemoved
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
	case phaseFailed:
		return watermark.StateFailed
	}
	return ""
}
