package pipeline

import (
	"github.com/tidemark/cdc/pkg/change"
)

// The publication's column lists and row filters (PostgreSQL 15) decide what a copy reads; the
// stream gets them applied by pgoutput. When a table's list or filter changes while it is
// exported, its topic holds rows copied under the old definition: columns the list no longer
// names (or lacks the ones it names now), rows that no longer pass the filter, and lacks those
// that pass it now. No row change in the stream says so. The export is copied again, with the
// copy strategy, whose reconcile publishes a delete and a tombstone for every key of the topic
// the new copy lacks.

// copiedAs records that e's current copy reads the rows and columns of def (under lc.mu).
func (lc *lifecycle) copiedAs(e change.ExportID, def change.PublishedAs) {
	lc.definitions[e] = def
}

// publicationDefinitions handles a poll of the publication's column lists and row filters
// (defs; a table not in it publishes every column and row). A hydrated export whose definition
// differs from the one its copy read is copied again. One being copied is looked at again once
// it is hydrated. An export resumed after a restart takes the definition it finds at the first
// poll as the one it was copied with.
func (lc *lifecycle) publicationDefinitions(defs map[change.ExportID]change.PublishedAs) {
	type recopy struct {
		e        change.ExportID
		was, now change.PublishedAs
	}
	var recopies []recopy
	lc.mu.Lock()
	for e, p := range lc.phases {
		if p != phaseHydrated {
			continue
		}
		now := defs[e]
		was, ok := lc.definitions[e]
		switch {
		case !ok:
			lc.definitions[e] = now
		case !was.Equal(now):
			lc.definitions[e] = now
			lc.pending = append(lc.pending, e)
			lc.reconcileNext[e] = true
			recopies = append(recopies, recopy{e, was, now})
		}
	}
	lc.mu.Unlock()
	for _, r := range recopies {
		lc.log.Info("the publication's column list or row filter of a table changed; copying it again",
			"export", r.e.String(), "was", r.was.String(), "now", r.now.String())
	}
	if len(recopies) > 0 {
		lc.wakePoll()
	}
}
