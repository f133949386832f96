package replication

import (
	"errors"
	"fmt"

	"github.com/tidemark/cdc/pkg/change"
)

// The router sends each export's changes as its route's mode says. Its owner (the pipeline's
// owner goroutine) sets the modes with commands (Resume, Detect, SetConsistentPoint, CopyDone,
// StartChunking, Remove, Fail, Restart) and learns what came of them from facts, in stream order
// with the data: a KindHydrated unit (held changes released, or the last chunk published, at
// End), a KindRemoved unit (the stream passed the removal at End), a KindFailed unit (a change of
// the export could not be encoded: the router dropped the export's route at once, so that
// nothing after the change is published), and Fact values for what is no export's business yet
// (a relation of a table that is not routed). It decides nothing about an export's phase: the
// owner moves an export on once the fact's unit is durable.

// routeMode is how the router sends one export's changes. It is not the export's phase: the
// pipeline's owner keeps that, and sets the mode with the stage's commands.
type routeMode uint8

const (
	// routeDirect: changes go to the export's topic in stream order.
	routeDirect routeMode = iota + 1
	// routeHold: changes go to the export's hold buffer (Detect, Restart).
	routeHold
	// routeRelease: held, and released once the stream passes the consistent point C, then
	// direct (CopyDone); the release is reported as a KindHydrated unit.
	routeRelease
	// routeDrain: direct until the stream passes removeAt, then dropped (Remove); reported as
	// a KindRemoved unit.
	routeDrain
	// routeDrop: dropped (Fail, a drain that ended, a change that could not be encoded).
	routeDrop
	// routeMerge: direct, and the chunks of a chunked copy merge in windows (StartChunking);
	// the last chunk's publication is reported as a KindHydrated unit.
	routeMerge
)

type route struct {
	mode routeMode
	// replayBelow: a hydrated export drops transactions with commit LSN below it (replay
	// after a restart).
	replayBelow change.LSN
	// c is the consistent point of the export's snapshot; hasC once it is known.
	c    change.LSN
	hasC bool
	hold *holdBuffer
	// removeAt is the server WAL position at which the removal was noticed.
	removeAt change.LSN
	// chunks: the chunked copy of a routeMerge export.
	chunks *chunking
}

// Commands, run on the stream goroutine in the order the owner sent them.

func (st *streamState) detect(exports []change.ExportID) {
	for _, e := range exports {
		if r, ok := st.routes[e]; ok {
			if r.hold != nil {
				r.hold.Close()
			}
			st.dropWindows(r)
		}
		st.routes[e] = &route{mode: routeHold, hold: newHoldBuffer(st.s.cfg.HoldMemory, st.s.cfg.SpillDir)}
	}
}

// setConsistentPoint records c for exports and drops what they hold below it. An export whose
// held changes cannot be read back (a spill file that broke) may have lost some: it gets a
// fresh buffer without a consistent point, holding everything until its snapshot is restarted,
// and the error says so. Nothing is dropped silently.
func (st *streamState) setConsistentPoint(exports []change.ExportID, c change.LSN) error {
	var errs []error
	for _, e := range exports {
		r, ok := st.routes[e]
		if !ok || r.hold == nil {
			continue
		}
		r.c, r.hasC = c, true
		if err := r.hold.DropBelow(c); err != nil {
			r.hold.Close()
			r.hold = newHoldBuffer(st.s.cfg.HoldMemory, st.s.cfg.SpillDir)
			r.c, r.hasC = 0, false
			errs = append(errs, fmt.Errorf("held changes of %s: %w", e, err))
		}
	}
	return errors.Join(errs...)
}

func (st *streamState) copyDone(e change.ExportID) {
	if r, ok := st.routes[e]; ok && r.mode == routeHold && r.hasC {
		r.mode = routeRelease
		st.watch[e] = struct{}{}
	}
}

func (st *streamState) remove(e change.ExportID, at change.LSN) {
	r, ok := st.routes[e]
	if !ok {
		return
	}
	if r.mode != routeDirect && r.mode != routeMerge {
		// Never hydrated: nothing of it was published directly; drop what it held.
		r.replayBelow = ^change.LSN(0)
	}
	st.dropWindows(r)
	if r.hold != nil {
		r.hold.Close()
		r.hold = nil
	}
	r.mode, r.removeAt = routeDrain, at
	st.watch[e] = struct{}{}
}

func (st *streamState) fail(e change.ExportID) {
	if r, ok := st.routes[e]; ok {
		if r.hold != nil {
			r.hold.Close()
			r.hold = nil
		}
		st.dropWindows(r)
		r.mode = routeDrop
	}
}

func (st *streamState) restartHold(e change.ExportID) {
	st.detect([]change.ExportID{e})
}
