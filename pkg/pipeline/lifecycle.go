package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// resume starts the exports the tracker restored from the watermark topic, before the stages
// run: hydrated ones follow the stream from their own position, chunked copies go on after their
// last durable chunk, and those no longer published get their final record. Every other export
// (a copy that never finished, a failed one) is copied again by the first poll.
func (o *owner) resume(ctx context.Context, cat catalog, published map[change.ExportID]struct{}, confirmed change.LSN) error {
	resume := o.tracker.Resume()
	positions := make(map[change.ExportID]change.LSN)
	var specs []sink.TopicSpec
	var jobs []snapshot.ChunkJob
	for _, e := range sortedExports(resume) {
		p := resume[e]
		attempt, after, chunked := o.tracker.Chunked(e)
		o.takeUp(e, chunked)
		if _, ok := published[e]; !ok {
			o.toRemoved(e, confirmed)
			o.log.Info("table left the publication while stopped", "export", e.String())
			continue
		}
		t, err := cat.LoadTable(ctx, e)
		if errors.Is(err, pgcat.ErrUnsupportedTable) {
			// E.g. the publication's column list leaves out a key column now: e alone stops.
			o.log.Error("export failed", "export", e.String(), "err", err)
			o.toFailed(e, err.Error())
			continue
		}
		if err != nil {
			return err
		}
		specs = append(specs, sink.TopicSpec{Name: o.topic(e), Compact: len(t.KeyColumns()) > 0})
		if p, ok := o.tracker.CopiedAs(e); ok {
			o.definitions[e] = p
		}
		if chunked {
			o.repl.ResumeChunking(e, p)
			jobs = append(jobs, snapshot.ChunkJob{Export: e, Attempt: attempt, ResumeAfter: after})
			o.log.Info("chunked copy resumes", "export", e.String(), "attempt", attempt, "after", fmt.Sprint(after))
		} else {
			positions[e] = p
		}
	}
	if err := o.topics.EnsureTopics(ctx, specs); err != nil {
		return err
	}
	o.repl.Resume(positions)
	for _, j := range jobs {
		o.chunks.Add(j)
	}
	return nil
}

// published handles a poll of the publication: tables that left it are removed once the stream
// passes the server's current WAL position; tables new to it (and exports to copy again) are
// copied, in chunks when they can be, otherwise with a snapshot request.
func (o *owner) published(ctx context.Context, cat catalog, published map[change.ExportID]struct{}) (err error) {
	var added, removed, known []change.ExportID
	for e, p := range o.phases {
		if !p.known() {
			continue
		}
		known = append(known, e)
		if _, ok := published[e]; !ok {
			removed = append(removed, e)
		}
	}
	for e := range published {
		if !o.phases[e].known() && o.mayAdd(e) {
			added = append(added, e)
		}
	}
	for _, e := range o.pending {
		if _, ok := published[e]; ok && !slices.Contains(added, e) && o.mayAdd(e) {
			added = append(added, e)
		}
	}
	pending := o.pending
	o.pending = nil
	defer func() {
		if err != nil {
			// Nothing was started for them: the next poll copies them (a re-copy waits for it).
			o.pending = append(pending, o.pending...)
		}
	}()

	slices.SortFunc(removed, compareExport)
	for _, e := range removed {
		at, err := cat.CurrentWAL(ctx)
		if err != nil {
			return fmt.Errorf("read WAL position: %w", err)
		}
		o.log.Info("table left the publication", "export", e.String(), "at", at.String())
		switch o.phases[e] {
		case phaseHydrated:
			o.setPhase(e, phaseRemovingHydrated)
		case phaseFailed:
			o.setPhase(e, phaseRemovingFailed)
		default:
			o.setPhase(e, phaseRemoving)
		}
		o.chunks.Stop(e)
		o.repl.Remove(e, at)
	}
	if len(added) == 0 {
		return nil
	}
	slices.SortFunc(added, compareExport)
	if err := change.CheckTopicCollisions(o.cfg.TopicPrefix, append(known, added...)); err != nil {
		return fatal(err)
	}
	copies, err := o.startChunked(ctx, cat, added)
	if err != nil {
		return err
	}
	if len(copies) == 0 {
		return nil
	}
	// Hold their changes before the snapshot's slot exists, so nothing falls in between. One
	// still hydrated (added again before its removal took effect, or copied again) stops
	// advancing first.
	for _, e := range copies {
		o.toHolding(e)
		o.recopyStarted(e)
	}
	// The snapshot is requested once the replication stage holds them.
	o.detecting = append(o.detecting, detectWait{applied: o.repl.Detect(copies), req: snapshot.Request{Exports: copies}})
	return nil
}

// partitions handles a poll of the published partitioned tables (a publication with
// publish_via_partition_root: the root is the export and its partitions' rows stream under its
// name). A partition attached or detached since the last poll changes the root's rows without a
// row change in the stream: the root is copied again with the copy strategy, whose reconcile
// publishes a delete and a tombstone for every key of its topic the new snapshot lacks, so a
// detached partition's rows leave the topic and an attached one's arrive as snapshot reads. A
// root that is being copied is looked at again once it is hydrated. leaves maps each root to
// the list of its leaf partitions.
func (o *owner) partitions(leaves map[change.ExportID]string) {
	var recopy []change.ExportID
	for e, l := range leaves {
		prev, seen := o.leaves[e]
		switch {
		case !seen:
			o.leaves[e] = l
		case prev == l, o.phases[e] != phaseHydrated:
		default:
			o.leaves[e] = l
			o.pending = append(o.pending, e)
			o.reconcileNext[e] = true
			recopy = append(recopy, e)
		}
	}
	for e := range o.leaves {
		if _, ok := leaves[e]; !ok {
			delete(o.leaves, e)
		}
	}
	for _, e := range recopy {
		o.log.Info("partitions of a published partitioned table changed; copying it again", "export", e.String())
	}
	if len(recopy) > 0 {
		o.wakePoll()
	}
}

// startChunked starts a chunked copy of each of exports that can take one (chunked strategy,
// a key, nothing to reconcile) and returns the others, which take a copy.
func (o *owner) startChunked(ctx context.Context, cat catalog, exports []change.ExportID) ([]change.ExportID, error) {
	if o.cfg.SnapshotStrategy.OrDefault() != snapshot.StrategyChunked {
		for _, e := range exports {
			delete(o.reconcileNext, e)
		}
		return exports, nil
	}
	var rest, chunked []change.ExportID
	var specs []sink.TopicSpec
	defs := make(map[change.ExportID]change.PublishedAs)
	for _, e := range exports {
		t, err := cat.LoadTable(ctx, e)
		if err != nil {
			// Missing or unsupported: the copy path reports it for this export alone.
			rest = append(rest, e)
			continue
		}
		can := o.tracker.CanChunk(e) && !o.reconcileNext[e]
		delete(o.reconcileNext, e)
		if len(t.KeyColumns()) == 0 || !can {
			rest = append(rest, e)
			continue
		}
		chunked = append(chunked, e)
		defs[e] = t.Published
		specs = append(specs, sink.TopicSpec{Name: o.topic(e), Compact: true})
	}
	if len(chunked) == 0 {
		return rest, nil
	}
	if err := o.topics.EnsureTopics(ctx, specs); err != nil {
		return nil, err
	}
	for _, e := range chunked {
		topic := o.topic(e)
		attempt := o.toChunking(e, topic, o.topics.EndOffsets(topic), time.Now())
		o.copiedAs(e, defs[e])
		o.repl.StartChunking(e)
		o.chunks.Add(snapshot.ChunkJob{Export: e, Attempt: attempt})
		o.recopyStarted(e)
		o.log.Info("chunked copy started", "export", e.String(), "attempt", attempt)
	}
	return rest, nil
}

// mayAdd reports whether e may be added to the exports again now: not while the record of its
// removal is still to be written (the next poll adds it), so that a restart never finds it
// hydrated with the changes made while it was out of the publication missing.
func (o *owner) mayAdd(e change.ExportID) bool {
	return o.phases[e] != phaseRemoved || !o.tracker.Owed(e)
}

// Snapshot stage (copy strategy).

// begin handles the start of a snapshot at its consistent point: the tables' topics must exist,
// then the replication stage learns the consistent point; once it applied it, begun records the
// attempts and the snapshot stage gets them (run). An error is the answer at once.
func (o *owner) begin(ctx context.Context, ev evBegin) error {
	specs := make([]sink.TopicSpec, 0, len(ev.tables))
	exports := make([]change.ExportID, 0, len(ev.tables))
	for _, t := range ev.tables {
		specs = append(specs, sink.TopicSpec{Name: o.topic(t.Table.Export), Compact: len(t.Table.KeyColumns()) > 0})
		exports = append(exports, t.Table.Export)
	}
	if err := o.topics.EnsureTopics(ctx, specs); err != nil {
		return err
	}
	o.beginning = append(o.beginning, beginWait{set: o.repl.SetConsistentPoint(exports, ev.c), ev: ev})
	return nil
}

// begun records the start of a snapshot attempt at consistent point lsn for each table and
// returns the attempt numbers.
func (o *owner) begun(lsn change.LSN, tables []snapshot.TableInfo) map[change.ExportID]int {
	now := time.Now()
	attempts := make(map[change.ExportID]int, len(tables))
	for _, t := range tables {
		e := t.Table.Export
		topic := o.topic(e)
		attempts[e] = o.toCopying(e, topic, lsn, t.EstimatedRows, o.topics.EndOffsets(topic), now)
		o.copiedAs(e, t.Table.Published)
		o.log.Info("snapshot started", "export", e.String(), "consistent_point", lsn.String(), "attempt", attempts[e], "estimated_rows", t.EstimatedRows)
	}
	return attempts
}

// restart: the table was rewritten during its copy, or its request failed; hold its changes
// again and copy it at the next poll.
func (o *owner) restart(e change.ExportID, reason string) {
	o.log.Warn("restarting snapshot", "export", e.String(), "reason", reason)
	o.repl.Restart(e)
	o.toHolding(e)
	o.pending = append(o.pending, e)
	o.wakePoll()
}

// failed stops e alone.
func (o *owner) failed(e change.ExportID, err error) {
	o.log.Error("export failed", "export", e.String(), "err", err)
	o.repl.Fail(e)
	o.chunks.Stop(e)
	if o.toFailed(e, err.Error()) {
		o.failures[e] = failureClass(err)
	}
}
