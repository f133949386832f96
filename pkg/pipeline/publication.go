package pipeline

import (
	"strings"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// The publication's column lists and row filters (PostgreSQL 15) decide what a copy reads; the
// stream gets them applied by pgoutput. When a table's list or filter changes while it is
// exported, its topic holds rows copied under the old definition: columns the list no longer
// names (or lacks the ones it names now), rows that no longer pass the filter, and lacks those
// that pass it now. No row change in the stream says so. The export is copied again, with the
// copy strategy, whose reconcile publishes a delete and a tombstone for every key of the topic
// the new copy lacks. The definition a copy read is kept in its watermark records
// (SnapshotInfo.Publication), so a change made while the service was stopped is noticed too.

// publishedInfo is def as the watermark records keep it (nil: every column and row).
func publishedInfo(def change.PublishedAs) *watermark.PublishedInfo {
	d := def.Digest()
	if d == "" {
		return nil
	}
	return &watermark.PublishedInfo{Columns: def.Names, RowFilter: def.RowFilter, Digest: d}
}

// describe renders p for a log line.
func describe(p *watermark.PublishedInfo) string {
	if p == nil {
		return "every column, every row"
	}
	cols, rows := "every column", "every row"
	if p.Columns != nil {
		cols = "columns (" + strings.Join(p.Columns, ", ") + ")"
	}
	if p.RowFilter != "" {
		rows = "rows WHERE " + p.RowFilter
	}
	return cols + ", " + rows
}

func digest(p *watermark.PublishedInfo) string {
	if p == nil {
		return ""
	}
	return p.Digest
}

// copiedAs records that e's current copy attempt reads the rows and columns of def (after the
// tracker started the attempt).
func (o *owner) copiedAs(e change.ExportID, def change.PublishedAs) {
	p := publishedInfo(def)
	o.definitions[e] = p
	o.tracker.SetCopiedAs(e, p)
}

// publicationDefinitions handles a poll of the publication's column lists and row filters
// (defs; a table not in it publishes every column and row). A hydrated export whose definition
// differs from the one its copy read is copied again. One being copied is looked at again once
// it is hydrated. An export whose copy's definition is not known (no snapshot attempt in its
// records) takes the first one polled.
func (o *owner) publicationDefinitions(defs map[change.ExportID]change.PublishedAs) {
	type recopy struct {
		e        change.ExportID
		was, now *watermark.PublishedInfo
	}
	var recopies []recopy
	for e, p := range o.phases {
		if p != phaseHydrated {
			continue
		}
		now := publishedInfo(defs[e])
		was, ok := o.definitions[e]
		switch {
		case !ok:
			o.definitions[e] = now
		case digest(was) != digest(now):
			o.definitions[e] = now
			o.pending = append(o.pending, e)
			o.reconcileNext[e] = true
			recopies = append(recopies, recopy{e, was, now})
		}
	}
	for _, r := range recopies {
		o.log.Info("the publication's column list or row filter of a table changed; copying it again",
			"export", r.e.String(), "was", describe(r.was), "now", describe(r.now))
	}
	if len(recopies) > 0 {
		o.wakePoll()
	}
}
