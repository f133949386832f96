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
	sorted := sortedExports(resume)
	// Every resumed table's schema in one read, however many there are.
	tables, loadErrs, err := cat.LoadTables(ctx, slices.DeleteFunc(slices.Clone(sorted), func(e change.ExportID) bool {
		_, ok := published[e]
		return !ok
	}))
	if err != nil {
		return err
	}
	for _, e := range sorted {
		p := resume[e]
		attempt, after, chunked := o.tracker.Chunked(e)
		o.takeUp(e, chunked)
		if _, ok := published[e]; !ok {
			o.toRemoved(e, confirmed)
			o.log.Info("table left the publication while stopped", "export", e.String())
			continue
		}
		t, err := tables[e], loadErrs[e]
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
	// A topic made again now (deleted meanwhile) is produced to once its leaders answer.
	names := make([]string, len(specs))
	for i, spec := range specs {
		names[i] = spec.Name
	}
	o.topics.AwaitLeaders(ctx, names)
	o.repl.Resume(positions)
	for _, j := range jobs {
		o.chunks.Add(j)
	}
	return nil
}

// A poll is taken in in steps, none of which waits on I/O in the owner's loop (polled, then
// loaded, then the topics' answer): the poller reads the publication and the server's WAL
// position, the owner decides what leaves and what is added, the poller loads the added tables'
// schemas, the topic administrator makes their topics, and only then do their copies start. The
// owner serves every other event meanwhile; the poller waits for the poll's outcome before it
// polls again, so one poll at most is being taken in (o.round).
type pollRound struct {
	ev evPolled
	// seq numbers the poll (owner.pollSeq): a re-copy asked during it waits for the next one.
	seq uint64
	// pending is owner.pending as the poll took it: restored when the poll fails.
	pending []change.ExportID
	// added: the exports the poll adds, in order; their phases when it decided, so that one
	// whose life moved on meanwhile (it failed) is not started by this poll.
	added  []change.ExportID
	phases map[change.ExportID]phase
	// started: the exports whose copy this poll started.
	started []change.ExportID
	// Its chunked copies (chunkTopics): batches of topics not answered yet, copies queued and
	// not started yet, the first error of a batch, and what runs once they are all done.
	topicsLeft, queued int
	firstErr           error
	then               func(error)
}

// polled handles a poll of the publication: tables that left it are removed once the stream
// passes the server's WAL position the poller read after the publication; tables new to it
// (and exports to copy again) are to be copied. In chunks when they can be: the poller is asked
// for their schemas first (loaded); otherwise with a snapshot request at once.
func (o *owner) polled(ev evPolled) {
	o.pollSeq++
	r := &pollRound{ev: ev, seq: o.pollSeq, pending: o.pending}
	o.pending = nil
	added, err := o.removeAndAdd(r)
	if err != nil || len(added) == 0 {
		o.pollDone(r, err)
		return
	}
	r.added = added
	r.phases = make(map[change.ExportID]phase, len(added))
	for _, e := range added {
		r.phases[e] = o.phases[e]
	}
	if o.cfg.SnapshotStrategy.OrDefault() != snapshot.StrategyChunked {
		o.startCopies(r, added)
		o.pollDone(r, nil)
		return
	}
	o.round = r
	ev.reply <- pollReply{load: added}
}

// removeAndAdd removes the exports that left the publication and returns those to add.
func (o *owner) removeAndAdd(r *pollRound) ([]change.ExportID, error) {
	published := r.ev.published
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
	for _, e := range r.pending {
		if _, ok := published[e]; ok && !slices.Contains(added, e) && o.mayAdd(e) {
			added = append(added, e)
		}
	}
	slices.SortFunc(removed, compareExport)
	for _, e := range removed {
		at := r.ev.wal
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
		return nil, nil
	}
	slices.SortFunc(added, compareExport)
	if err := change.CheckTopicCollisions(o.cfg.TopicPrefix, append(known, added...)); err != nil {
		return nil, fatal(err)
	}
	return added, nil
}

// loaded handles the schemas of the tables the poll being taken in adds (a table missing
// from tables could not be loaded: the copy path reports it for that export alone). Those that
// can take a chunked copy (a key, nothing to reconcile) wait for their topics; the others take
// a copy.
func (o *owner) loaded(ev evLoaded) {
	r := o.round
	if r == nil || r.ev.reply != ev.reply {
		ev.reply <- pollReply{err: errors.New("tables loaded for a poll that is not being taken in")}
		return
	}
	if ev.err != nil {
		o.pollDone(r, ev.err)
		return
	}
	var rest, chunked []change.ExportID
	defs := make(map[change.ExportID]change.PublishedAs)
	for _, e := range r.added {
		t := ev.tables[e]
		if t == nil || len(t.KeyColumns()) == 0 || !o.tracker.CanChunk(e) || o.reconcileNext[e] {
			rest = append(rest, e)
			continue
		}
		chunked = append(chunked, e)
		defs[e] = t.Published
	}
	if len(chunked) == 0 {
		o.startCopies(r, rest)
		o.pollDone(r, nil)
		return
	}
	o.chunkTopics(r, chunked, defs, func(err error) {
		if err == nil {
			o.startCopies(r, rest)
		}
		o.pollDone(r, err)
	})
}

// topicBatch is how many topics one job of the topic administrator makes for a poll's chunked
// copies. Each batch's copies start as soon as its own topics are made, so the first tables
// are copied while the broker makes the partitions of the later ones (about 3 ms a partition
// on the one test broker: 10,000 tables' topics take it half a minute).
const topicBatch = 500

// chunkTopics has the topics of exports made in batches, and queues each batch's chunked
// copies once its topics are made (startQueued starts them as room allows). A topic the broker
// refuses for good fails its export alone (sink.TopicErrors); any other error leaves the
// batch's exports to the next poll. then runs once every batch is answered and every queued
// copy started, with the first such error.
func (o *owner) chunkTopics(r *pollRound, exports []change.ExportID, defs map[change.ExportID]change.PublishedAs, then func(error)) {
	r.topicsLeft, r.then = (len(exports)+topicBatch-1)/topicBatch, then
	for batch := range slices.Chunk(exports, topicBatch) {
		specs := make([]sink.TopicSpec, len(batch))
		for i, e := range batch {
			specs[i] = sink.TopicSpec{Name: o.topic(e), Compact: true}
		}
		o.ensureTopics(specs, func(err error) {
			var refused sink.TopicErrors
			if errors.As(err, &refused) {
				batch, err = o.topicsRefused(r, batch, refused), nil
			}
			if err == nil {
				for _, e := range batch {
					o.backlog = append(o.backlog, queuedChunk{r: r, e: e, def: defs[e]})
				}
				r.queued += len(batch)
			} else if r.firstErr == nil {
				r.firstErr = err
			}
			r.topicsLeft--
			o.startQueued()
			o.roundDone(r)
		})
	}
}

// chunkWindow is how many exports may be in a chunked copy at once per snapshot worker. The
// chunker keeps at most 2 × 64 small tables' chunks per worker in memory until they are
// durable, so more copies at once would only wait in its queue, each with its own watermark
// records and progress meanwhile: with 10,000 tables started at once, 3,000 of them waiting
// made every batch of the sink carry thousands of records, and hydrating slowed to 5 tables a
// second.
const chunkWindow = 128

// queuedChunk is an export of poll r whose topic is made and whose chunked copy waits for room.
type queuedChunk struct {
	r   *pollRound
	e   change.ExportID
	def change.PublishedAs
}

// startQueued starts the queued chunked copies while fewer than chunkWindow per worker run,
// and ends the poll whose last copy it started.
func (o *owner) startQueued() {
	workers := o.cfg.Snapshot.Workers
	if workers <= 0 {
		workers = snapshot.DefaultWorkers
	}
	limit := chunkWindow * workers
	for len(o.backlog) > 0 && o.chunking < limit {
		q := o.backlog[0]
		o.backlog = o.backlog[1:]
		o.startChunks(q.r, []change.ExportID{q.e}, map[change.ExportID]change.PublishedAs{q.e: q.def})
		q.r.queued--
		o.roundDone(q.r)
	}
	if len(o.backlog) == 0 {
		o.backlog = nil // the array of a large start goes
	}
}

// roundDone ends r's chunked copies' part once every batch of topics is answered and every
// queued copy started.
func (o *owner) roundDone(r *pollRound) {
	if r.topicsLeft == 0 && r.queued == 0 && r.then != nil {
		then := r.then
		r.then = nil
		then(r.firstErr)
	}
}

// topicsRefused fails the exports of batch whose topics the broker refused (refused), each with
// the broker's reason, and returns the others.
func (o *owner) topicsRefused(r *pollRound, batch []change.ExportID, refused sink.TopicErrors) []change.ExportID {
	return slices.DeleteFunc(slices.Clone(batch), func(e change.ExportID) bool {
		err := refused[o.topic(e)]
		if err == nil {
			return false
		}
		o.failed(e, fmt.Errorf("%w: %w", errTopicRefused, err))
		r.started = append(r.started, e) // taken in: not copied again by the next poll
		return true
	})
}

// unchanged drops from exports those whose phase moved since the poll r decided to add them
// (a failure meanwhile): they are not started by it.
func (o *owner) unchanged(r *pollRound, exports []change.ExportID) []change.ExportID {
	return slices.DeleteFunc(exports, func(e change.ExportID) bool {
		if o.phases[e] != r.phases[e] {
			o.log.Info("table not copied by this poll: its state changed meanwhile", "export", e.String(), "phase", o.phases[e].String())
			return true
		}
		return false
	})
}

// startChunks starts a chunked copy of each of exports, whose topics exist.
func (o *owner) startChunks(r *pollRound, exports []change.ExportID, defs map[change.ExportID]change.PublishedAs) {
	for _, e := range o.unchanged(r, exports) {
		delete(o.reconcileNext, e)
		topic := o.topic(e)
		attempt := o.toChunking(e, topic, o.topics.EndOffsets(topic), time.Now())
		o.copiedAs(e, defs[e])
		o.repl.StartChunking(e)
		o.chunks.Add(snapshot.ChunkJob{Export: e, Attempt: attempt})
		o.recopyStarted(e)
		r.started = append(r.started, e)
		o.copyStarted.Note(e.String(), "export", e.String(), "attempt", attempt)
	}
}

// startCopies starts a copy of each of exports (copy strategy): their changes are held before
// the snapshot's slot exists, so nothing falls in between (one still hydrated, added again
// before its removal took effect or copied again, stops advancing first); the snapshot is
// requested once the replication stage holds them.
func (o *owner) startCopies(r *pollRound, exports []change.ExportID) {
	copies := o.unchanged(r, exports)
	if len(copies) == 0 {
		return
	}
	for _, e := range copies {
		delete(o.reconcileNext, e)
		o.toHolding(e)
		o.recopyStarted(e)
		r.started = append(r.started, e)
	}
	o.detecting = append(o.detecting, detectWait{applied: o.repl.Detect(copies), req: snapshot.Request{Exports: copies}})
}

// pollDone ends the poll r with its outcome: on an error nothing was started for its tables,
// and the next poll copies them (a re-copy waits for it).
func (o *owner) pollDone(r *pollRound, err error) {
	if o.round == r {
		o.round = nil
	}
	if err != nil {
		// Those of them that this poll started (some batches of topics were made) are not
		// copied again.
		o.pending = append(slices.DeleteFunc(r.pending, func(e change.ExportID) bool { return slices.Contains(r.started, e) }), o.pending...)
	} else if len(r.started) > 0 {
		// A re-copy asked for while the poll was being taken in, of an export it started.
		o.pending = slices.DeleteFunc(o.pending, func(e change.ExportID) bool { return slices.Contains(r.started, e) })
	}
	var waiting []change.ExportID
	for e := range r.ev.published {
		if !o.phases[e].known() {
			waiting = append(waiting, e)
		}
	}
	o.admitted(&o.stuckPoll, err, waiting)
	if b := o.stuckBegin.Load(); b != nil && !o.anyHolding(b.exports) {
		o.stuckBegin.Store(nil)
	}
	o.recopiesPolled(err, r.seq)
	if err == nil {
		o.partitions(r.ev.leaves)
		o.publicationDefinitions(r.ev.defs)
	}
	r.ev.reply <- pollReply{err: err}
}

// ensureTopics has the topic administrator make the topics of specs, beside the loop; then
// runs on the owner's goroutine with the outcome, when it comes.
func (o *owner) ensureTopics(specs []sink.TopicSpec, then func(error)) {
	o.topicQ = append(o.topicQ, topicJob{specs: specs, then: then})
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

// mayAdd reports whether e may be added to the exports again now: not while the record of its
// removal is still to be written (the next poll adds it), so that a restart never finds it
// hydrated with the changes made while it was out of the publication missing.
func (o *owner) mayAdd(e change.ExportID) bool {
	return o.phases[e] != phaseRemoved || !o.tracker.Owed(e)
}

// Snapshot stage (copy strategy).

// begin handles the start of a snapshot at its consistent point: the tables' topics must exist
// (the topic administrator makes them), then the replication stage learns the consistent point;
// once it applied it, begun records the attempts and the snapshot stage gets them (run). An
// error is the answer at once.
func (o *owner) begin(ev evBegin) {
	specs := make([]sink.TopicSpec, 0, len(ev.tables))
	exports := make([]change.ExportID, 0, len(ev.tables))
	for _, t := range ev.tables {
		specs = append(specs, sink.TopicSpec{Name: o.topic(t.Table.Export), Compact: len(t.Table.KeyColumns()) > 0})
		exports = append(exports, t.Table.Export)
	}
	o.ensureTopics(specs, func(err error) {
		o.admitted(&o.stuckBegin, err, exports)
		if err != nil {
			ev.reply <- beginReply{nil, err}
			return
		}
		o.beginning = append(o.beginning, beginWait{set: o.repl.SetConsistentPoint(exports, ev.c), ev: ev})
	})
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
