package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// phase is where an export is in its lifecycle, as the lifecycle owner sees it.
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
	// phaseRemoving: left the publication; routed until the stream passes the removal.
	phaseRemoving
	phaseRemoved
	phaseFailed
)

var phaseNames = [...]string{"", "holding", "copying", "releasing", "chunking", "hydrated", "removing", "removed", "failed"}

func (p phase) String() string { return phaseNames[p] }

// known reports whether an export in phase p is routed: published and not re-added by a poll.
func (p phase) known() bool { return p != 0 && p != phaseRemoving && p != phaseRemoved }

// The lifecycle owner drives the stages through these commands; the production values are the
// stages themselves, the unit tests give fakes.
type (
	replicationControl interface {
		Resume(positions map[change.ExportID]change.LSN)
		ResumeChunking(e change.ExportID, position change.LSN)
		Detect(ctx context.Context, exports []change.ExportID) error
		SetConsistentPoint(ctx context.Context, exports []change.ExportID, c change.LSN) error
		CopyDone(e change.ExportID)
		Remove(e change.ExportID, at change.LSN)
		Fail(e change.ExportID)
		Restart(e change.ExportID)
		StartChunking(ctx context.Context, e change.ExportID) error
		OpenWindow(id uint64, e change.ExportID, seq int)
		ChunkRead(id uint64, u *change.Unit, release func())
		AbandonWindow(id uint64)
		CopyComplete(e change.ExportID, total int)
	}
	chunkControl interface {
		Add(job snapshot.ChunkJob)
		Stop(e change.ExportID)
	}
	topicControl interface {
		EnsureTopics(ctx context.Context, specs []sink.TopicSpec) error
		EndOffsets(topic string) map[int32]int64
	}
	// catalog reads what the lifecycle needs from PostgreSQL: a table's schema, the server's
	// WAL position.
	catalog interface {
		LoadTable(ctx context.Context, e change.ExportID) (*change.Table, error)
		CurrentWAL(ctx context.Context) (change.LSN, error)
	}
)

var (
	_ replicationControl = (*replication.Stage)(nil)
	_ chunkControl       = (*snapshot.Chunker)(nil)
	_ topicControl       = (*sink.Sink)(nil)
)

// lifecycle owns every export's lifecycle: its phase, and the watermark tracker behind the same
// mutex. Every event that changes an export's lifecycle reaches it: the publication as polled
// (published), the snapshot stage's and the chunker's reports (snapshot.Hooks,
// snapshot.ChunkHooks), the units the sink made durable (sink.Progress), the replication stage's
// questions (replication.Hooks) and re-copies asked for by an operator (resnapshot). It answers
// each with typed commands to the stages. The stages never call one another.
type lifecycle struct {
	mu      sync.Mutex
	tracker *watermark.Tracker
	phases  map[change.ExportID]phase
	// failures is the class of each failed export's error (failureClass), where it is known.
	failures map[change.ExportID]string
	// pending: exports to copy again at the next poll (a restarted copy, a re-copy on demand).
	pending []change.ExportID
	// startLSN is the slot's confirmed position at start-up: confirmable until the tracker
	// knows better.
	startLSN change.LSN

	cfg      Config
	log      *slog.Logger
	repl     replicationControl
	chunks   chunkControl
	topics   topicControl
	requests chan snapshot.Request
	topic    func(change.ExportID) string
	// wakePoll asks the poller to look at the publication now.
	wakePoll func()
	// streaming reports whether the replication stage streams now.
	streaming func() bool

	// keyConn opens connections to read key columns (replica identity FULL) and tables to
	// reconcile.
	keyConn   func(ctx context.Context) (*pgcat.Conn, error)
	keyConnMu sync.Mutex
	// codec encodes reconcile deletes. reconciles (under mu) are the exports to reconcile, in
	// order; reconcileSig (capacity 1) says it is not empty. Queuing never blocks: it happens
	// in the sink's Committed.
	codec        codec.Config
	reconciles   []reconcileJob
	reconcileSig chan struct{}
	// sink scans topics for reconciles.
	sink *sink.Sink
	// copied: exports whose copy became durable in the batch not yet committed.
	copied []change.ExportID
	// leaves: per published partitioned table (publish_via_partition_root), its leaf
	// partitions as last acted on (partitions). reconcileNext (under mu): exports whose next
	// copy must reconcile their topic, so it takes the copy strategy.
	leaves        map[change.ExportID]string
	reconcileNext map[change.ExportID]bool
	// definitions (under mu): per export, the publication's column list and row filter its
	// current copy read (publication.go).
	definitions map[change.ExportID]*watermark.PublishedInfo
	// partial (under mu) is the transaction published in pieces whose last piece is not
	// durable yet, as far as the durable units tell (restored from the checkpoint at start).
	// While it is set no watermark record is written: a consumer reading a topic up to a
	// watermark's offsets never sees part of a transaction.
	partial *change.Partial
}

var (
	_ sink.Progress       = (*lifecycle)(nil)
	_ replication.Hooks   = (*lifecycle)(nil)
	_ snapshot.Hooks      = (*lifecycle)(nil)
	_ snapshot.ChunkHooks = (*lifecycle)(nil)
)

func newLifecycle(cfg Config, tracker *watermark.Tracker, log *slog.Logger) *lifecycle {
	return &lifecycle{
		cfg: cfg, tracker: tracker, log: log,
		phases:        make(map[change.ExportID]phase),
		failures:      make(map[change.ExportID]string),
		requests:      make(chan snapshot.Request, 16),
		topic:         func(e change.ExportID) string { return change.TopicName(cfg.TopicPrefix, e) },
		wakePoll:      func() {},
		streaming:     func() bool { return false },
		reconcileSig:  make(chan struct{}, 1),
		leaves:        make(map[change.ExportID]string),
		reconcileNext: make(map[change.ExportID]bool),
		definitions:   make(map[change.ExportID]*watermark.PublishedInfo),
	}
}

// phase returns e's phase (0 when unknown).
func (lc *lifecycle) phase(e change.ExportID) phase {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.phases[e]
}

// resume starts the exports the tracker restored from the watermark topic, before the stages
// run: hydrated ones follow the stream from their own position, chunked copies go on after their
// last durable chunk, and those no longer published get their final record. Every other export
// (a copy that never finished, a failed one) is copied again by the first poll.
func (lc *lifecycle) resume(ctx context.Context, cat catalog, published map[change.ExportID]struct{}, confirmed change.LSN) error {
	lc.mu.Lock()
	resume := lc.tracker.Resume()
	lc.mu.Unlock()
	positions := make(map[change.ExportID]change.LSN)
	var specs []sink.TopicSpec
	var jobs []snapshot.ChunkJob
	for _, e := range sortedExports(resume) {
		p := resume[e]
		if _, ok := published[e]; !ok {
			lc.mu.Lock()
			lc.tracker.Removed(e, confirmed)
			lc.phases[e] = phaseRemoved
			lc.mu.Unlock()
			lc.log.Info("table left the publication while stopped", "export", e.String())
			continue
		}
		t, err := cat.LoadTable(ctx, e)
		if errors.Is(err, pgcat.ErrUnsupportedTable) {
			// E.g. the publication's column list leaves out a key column now: e alone stops.
			lc.log.Error("export failed", "export", e.String(), "err", err)
			lc.mu.Lock()
			lc.tracker.Failed(e, err.Error())
			lc.phases[e] = phaseFailed
			lc.mu.Unlock()
			continue
		}
		if err != nil {
			return err
		}
		specs = append(specs, sink.TopicSpec{Name: lc.topic(e), Compact: len(t.KeyColumns()) > 0})
		lc.mu.Lock()
		if p, ok := lc.tracker.CopiedAs(e); ok {
			lc.definitions[e] = p
		}
		attempt, after, chunked := lc.tracker.Chunked(e)
		if chunked {
			lc.phases[e] = phaseChunking
		} else {
			lc.phases[e] = phaseHydrated
		}
		lc.mu.Unlock()
		if chunked {
			lc.repl.ResumeChunking(e, p)
			jobs = append(jobs, snapshot.ChunkJob{Export: e, Attempt: attempt, ResumeAfter: after})
			lc.log.Info("chunked copy resumes", "export", e.String(), "attempt", attempt, "after", fmt.Sprint(after))
		} else {
			positions[e] = p
		}
	}
	if err := lc.topics.EnsureTopics(ctx, specs); err != nil {
		return err
	}
	lc.repl.Resume(positions)
	for _, j := range jobs {
		lc.chunks.Add(j)
	}
	return nil
}

// published handles a poll of the publication: tables that left it are removed once the stream
// passes the server's current WAL position; tables new to it (and exports to copy again) are
// copied, in chunks when they can be, otherwise with a snapshot request.
func (lc *lifecycle) published(ctx context.Context, cat catalog, published map[change.ExportID]struct{}) error {
	lc.mu.Lock()
	var added, removed, known []change.ExportID
	for e, p := range lc.phases {
		if !p.known() {
			continue
		}
		known = append(known, e)
		if _, ok := published[e]; !ok {
			removed = append(removed, e)
		}
	}
	for e := range published {
		if !lc.phases[e].known() {
			added = append(added, e)
		}
	}
	for _, e := range lc.pending {
		if _, ok := published[e]; ok && !slices.Contains(added, e) {
			added = append(added, e)
		}
	}
	lc.pending = nil
	lc.mu.Unlock()

	slices.SortFunc(removed, compareExport)
	for _, e := range removed {
		at, err := cat.CurrentWAL(ctx)
		if err != nil {
			return fmt.Errorf("read WAL position: %w", err)
		}
		lc.log.Info("table left the publication", "export", e.String(), "at", at.String())
		lc.setPhase(e, phaseRemoving)
		lc.chunks.Stop(e)
		lc.repl.Remove(e, at)
	}
	if len(added) == 0 {
		return nil
	}
	slices.SortFunc(added, compareExport)
	if err := change.CheckTopicCollisions(lc.cfg.TopicPrefix, append(known, added...)); err != nil {
		return fatal(err)
	}
	copies, err := lc.startChunked(ctx, cat, added)
	if err != nil {
		return err
	}
	if len(copies) == 0 {
		return nil
	}
	// Hold their changes before the snapshot's slot exists, so nothing falls in between. One
	// still hydrated (added again before its removal took effect, or copied again) stops
	// advancing first.
	lc.mu.Lock()
	for _, e := range copies {
		lc.tracker.Holding(e)
		lc.phases[e] = phaseHolding
	}
	lc.mu.Unlock()
	if err := lc.repl.Detect(ctx, copies); err != nil {
		return err
	}
	lc.log.Info("hydrating tables", "exports", fmt.Sprint(copies))
	select {
	case lc.requests <- snapshot.Request{Exports: copies}:
	case <-ctx.Done():
		return ctx.Err()
	}
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
func (lc *lifecycle) partitions(leaves map[change.ExportID]string) {
	lc.mu.Lock()
	var recopy []change.ExportID
	for e, l := range leaves {
		prev, seen := lc.leaves[e]
		switch {
		case !seen:
			lc.leaves[e] = l
		case prev == l, lc.phases[e] != phaseHydrated:
		default:
			lc.leaves[e] = l
			lc.pending = append(lc.pending, e)
			lc.reconcileNext[e] = true
			recopy = append(recopy, e)
		}
	}
	for e := range lc.leaves {
		if _, ok := leaves[e]; !ok {
			delete(lc.leaves, e)
		}
	}
	lc.mu.Unlock()
	for _, e := range recopy {
		lc.log.Info("partitions of a published partitioned table changed; copying it again", "export", e.String())
	}
	if len(recopy) > 0 {
		lc.wakePoll()
	}
}

// startChunked starts a chunked copy of each of exports that can take one (chunked strategy,
// a key, nothing to reconcile) and returns the others, which take a copy.
func (lc *lifecycle) startChunked(ctx context.Context, cat catalog, exports []change.ExportID) ([]change.ExportID, error) {
	if lc.cfg.SnapshotStrategy != StrategyChunked {
		lc.mu.Lock()
		for _, e := range exports {
			delete(lc.reconcileNext, e)
		}
		lc.mu.Unlock()
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
		lc.mu.Lock()
		can := lc.tracker.CanChunk(e) && !lc.reconcileNext[e]
		delete(lc.reconcileNext, e)
		lc.mu.Unlock()
		if len(t.KeyColumns()) == 0 || !can {
			rest = append(rest, e)
			continue
		}
		chunked = append(chunked, e)
		defs[e] = t.Published
		specs = append(specs, sink.TopicSpec{Name: lc.topic(e), Compact: true})
	}
	if len(chunked) == 0 {
		return rest, nil
	}
	if err := lc.topics.EnsureTopics(ctx, specs); err != nil {
		return nil, err
	}
	for _, e := range chunked {
		topic := lc.topic(e)
		lc.mu.Lock()
		attempt := lc.tracker.StartChunked(e, topic, 0, lc.topics.EndOffsets(topic), time.Now())
		lc.phases[e] = phaseChunking
		lc.copiedAs(e, defs[e])
		lc.mu.Unlock()
		if err := lc.repl.StartChunking(ctx, e); err != nil {
			return nil, err
		}
		lc.chunks.Add(snapshot.ChunkJob{Export: e, Attempt: attempt})
		lc.log.Info("chunked copy started", "export", e.String(), "attempt", attempt)
	}
	return rest, nil
}

func (lc *lifecycle) setPhase(e change.ExportID, p phase) {
	lc.mu.Lock()
	lc.phases[e] = p
	lc.mu.Unlock()
}

// Errors of resnapshot.
var (
	errUnknownExport = errors.New("not an exported table")
	errNotHydrated   = errors.New("not hydrated: only a hydrated table can be copied again")
)

// resnapshot copies e again (a consumer lost its state): its rows are published again, in
// chunks when e can take them, otherwise with a snapshot that reconciles as after a re-add. e
// must be hydrated.
func (lc *lifecycle) resnapshot(e change.ExportID) error {
	lc.mu.Lock()
	p := lc.phases[e]
	switch {
	case !p.known():
		lc.mu.Unlock()
		return fmt.Errorf("%s: %w", e, errUnknownExport)
	case p != phaseHydrated:
		lc.mu.Unlock()
		return fmt.Errorf("%s is %s: %w", e, p, errNotHydrated)
	}
	lc.pending = append(lc.pending, e)
	lc.mu.Unlock()
	lc.wakePoll()
	return nil
}

// Snapshot stage (copy strategy).

// Begin records the start of a snapshot attempt for each table and tells the replication
// stage the consistent point.
func (lc *lifecycle) Begin(ctx context.Context, lsn change.LSN, tables []snapshot.TableInfo) (map[change.ExportID]int, error) {
	specs := make([]sink.TopicSpec, 0, len(tables))
	exports := make([]change.ExportID, 0, len(tables))
	for _, t := range tables {
		specs = append(specs, sink.TopicSpec{Name: lc.topic(t.Table.Export), Compact: len(t.Table.KeyColumns()) > 0})
		exports = append(exports, t.Table.Export)
	}
	if err := lc.topics.EnsureTopics(ctx, specs); err != nil {
		return nil, err
	}
	if err := lc.repl.SetConsistentPoint(ctx, exports, lsn); err != nil {
		return nil, err
	}
	now := time.Now()
	attempts := make(map[change.ExportID]int, len(tables))
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, t := range tables {
		e := t.Table.Export
		topic := lc.topic(e)
		attempts[e] = lc.tracker.StartHydration(e, topic, lsn, t.EstimatedRows, lc.topics.EndOffsets(topic), now)
		lc.phases[e] = phaseCopying
		lc.copiedAs(e, t.Table.Published)
		lc.log.Info("snapshot started", "export", e.String(), "consistent_point", lsn.String(), "attempt", attempts[e], "estimated_rows", t.EstimatedRows)
	}
	return attempts, nil
}

// Restart: the table was rewritten during its copy, or its request failed; hold its changes
// again and copy it at the next poll.
func (lc *lifecycle) Restart(e change.ExportID, reason string) {
	lc.log.Warn("restarting snapshot", "export", e.String(), "reason", reason)
	lc.repl.Restart(e)
	lc.mu.Lock()
	lc.phases[e] = phaseHolding
	lc.pending = append(lc.pending, e)
	lc.mu.Unlock()
	lc.wakePoll()
}

// Failed stops e alone.
func (lc *lifecycle) Failed(e change.ExportID, err error) {
	lc.log.Error("export failed", "export", e.String(), "err", err)
	lc.repl.Fail(e)
	lc.chunks.Stop(e)
	lc.mu.Lock()
	lc.tracker.Failed(e, err.Error())
	lc.failures[e] = failureClass(err)
	lc.phases[e] = phaseFailed
	lc.mu.Unlock()
}

// Chunker (chunked strategy): its chunks go to the replication stage, which merges them with
// the stream.

func (lc *lifecycle) OpenWindow(id uint64, e change.ExportID, seq int) {
	lc.repl.OpenWindow(id, e, seq)
}
func (lc *lifecycle) ChunkRead(id uint64, u *change.Unit, release func()) {
	lc.repl.ChunkRead(id, u, release)
}
func (lc *lifecycle) AbandonWindow(id uint64)                   { lc.repl.AbandonWindow(id) }
func (lc *lifecycle) CopyComplete(e change.ExportID, total int) { lc.repl.CopyComplete(e, total) }

// Sink.

// Durable applies units the sink made durable, in order, and returns the watermark records due.
func (lc *lifecycle) Durable(units []*change.Unit, offsets sink.Offsets) []change.Record {
	now := time.Now()
	var stop []change.ExportID
	lc.mu.Lock()
	pieces := false
	for _, u := range units {
		switch u.Kind {
		case change.KindTxn, change.KindProgress:
			if u.Piece != nil {
				pieces = true
				lc.partial = partialAfter(u)
			}
			// A piece before the last has no End: the position stays before its transaction.
			if u.Piece == nil || u.Piece.Last {
				lc.tracker.Advance(u.End)
			}
		case change.KindSnapshot:
			lc.tracker.SnapshotRows(u.Export, int64(u.Rows))
		case change.KindSnapshotDone:
			lc.tracker.SnapshotCopied(u.Export, now)
			// Acted on once committed: reconciling reads the topic read-committed.
			lc.copied = append(lc.copied, u.Export)
		case change.KindChunk:
			lc.tracker.ChunkDone(u.Export, u.Chunk, now)
		case change.KindHydrated:
			lc.tracker.Hydrated(u.Export, u.End)
			lc.phases[u.Export] = phaseHydrated
		case change.KindRemoved:
			lc.tracker.Removed(u.Export, u.End)
			lc.phases[u.Export] = phaseRemoved
		case change.KindFailed:
			lc.tracker.Failed(u.Export, u.Err)
			lc.failures[u.Export] = failureClass(u.Cause)
			lc.phases[u.Export] = phaseFailed
			stop = append(stop, u.Export)
		}
		if u.Release != nil {
			u.Release()
			u.Release = nil
		}
	}
	var recs []watermark.Record
	var quiet *watermark.Quiet
	if lc.partial == nil {
		// While a transaction is partly published its records would lie below the offsets of
		// any watermark record: records wait until its last piece is durable. (The stream
		// position does not move meanwhile, and the sink starts a new batch at a transaction's
		// first piece, so nothing else waits behind it: only state changes of exports being
		// copied, which a restart repeats anyway.)
		recs = lc.tracker.Due(now, func(topic string) map[int32]int64 { return offsets[topic] })
		if q, ok := lc.tracker.Quiet(now); ok {
			quiet = &q
		}
	}
	out := make([]change.Record, 0, len(recs))
	for _, r := range recs {
		v, err := watermark.Encode(r)
		if err != nil {
			lc.log.Error("encode watermark record", "export", r.Export.String(), "err", err)
			continue
		}
		out = append(out, change.Record{Topic: lc.cfg.WatermarkTopic, Partition: change.AnyPartition, Key: r.Key(), Value: v})
	}
	// One record for every quiet export, after their own records.
	if quiet != nil {
		if v, err := watermark.EncodeQuiet(*quiet); err != nil {
			lc.log.Error("encode quiet watermark record", "err", err)
		} else {
			out = append(out, change.Record{Topic: lc.cfg.WatermarkTopic, Partition: change.AnyPartition, Key: []byte(watermark.QuietKey), Value: v})
		}
	}
	// After Due: the records above carry every state transition up to this point, so the
	// checkpoint applies to exactly the exports they (or earlier records) say follow the stream.
	// (In exactly-once mode Carry wrote it already, into the same transaction.)
	if lsn, ok := lc.tracker.Checkpoint(); ok {
		out = lc.appendCheckpoint(out, lsn, lc.partial, now)
	} else if pieces && lc.partial != nil && lc.cfg.Delivery == AtLeastOnce {
		// The pieces acknowledged so far are skipped if the process restarts.
		out = lc.appendCheckpoint(out, lc.tracker.CheckpointPosition(), lc.partial, now)
	}
	lc.mu.Unlock()
	for _, e := range stop {
		lc.chunks.Stop(e)
	}
	return out
}

// Carry returns the checkpoint of an exactly-once transaction, produced with its units: the end
// of its last stream unit. Durable, called before the same transaction commits, adds the
// watermark records of every state transition, so the checkpoint covers the same exports as if
// it were written after them.
//
// A transaction of several pieces is published in several Kafka transactions. Each one that
// holds pieces carries a checkpoint naming the changes of the transaction durable with it
// (change.Partial), at an unchanged position until the last piece, so that a restart publishes
// neither those changes again nor any change after them twice.
func (lc *lifecycle) Carry(units []*change.Unit) []change.Record {
	var end change.LSN
	lc.mu.Lock()
	defer lc.mu.Unlock()
	partial, pieces := lc.partial, false
	for _, u := range units {
		if u.Kind == change.KindTxn || u.Kind == change.KindProgress {
			end = max(end, u.End)
			if u.Piece != nil {
				partial, pieces = partialAfter(u), true
			}
		}
	}
	var lsn change.LSN
	ok := false
	if end != 0 {
		lsn, ok = lc.tracker.CheckpointAt(end)
	}
	if !ok && pieces && partial != nil {
		lsn, ok = lc.tracker.CheckpointPosition(), true
	}
	if !ok {
		return nil
	}
	return lc.appendCheckpoint(nil, lsn, partial, time.Now())
}

// partialAfter is the partly published transaction once piece unit u is durable.
func partialAfter(u *change.Unit) *change.Partial {
	if u.Piece.Last {
		return nil
	}
	return &change.Partial{Commit: u.Commit, Changes: u.Piece.Changes}
}

func (lc *lifecycle) appendCheckpoint(out []change.Record, lsn change.LSN, partial *change.Partial, now time.Time) []change.Record {
	v, err := watermark.EncodeCheckpoint(lsn, partial, now)
	if err != nil {
		lc.log.Error("encode checkpoint", "lsn", lsn.String(), "err", err)
		return out
	}
	return append(out, change.Record{Topic: lc.cfg.WatermarkTopic, Partition: change.AnyPartition, Key: []byte(watermark.CheckpointKey), Value: v})
}

// Committed marks the last records durable; copies that became durable move on.
func (lc *lifecycle) Committed() {
	lc.mu.Lock()
	lc.tracker.Published()
	copied := lc.copied
	lc.copied = nil
	for _, e := range copied {
		if lc.phases[e] == phaseCopying {
			lc.phases[e] = phaseReleasing
		}
	}
	var done []change.ExportID
	for _, e := range copied {
		if !lc.copyDurable(e) {
			done = append(done, e)
		}
	}
	lc.mu.Unlock()
	for _, e := range done {
		lc.repl.CopyDone(e)
	}
}

// Confirmable is what the slot may confirm.
func (lc *lifecycle) Confirmable() (change.LSN, bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lsn, ok := lc.tracker.Confirmable(); ok {
		return max(lsn, lc.startLSN), true
	}
	return lc.startLSN, lc.startLSN != 0
}

// Replication stage.

// KeyColumns loads the key columns of e (replica identity FULL tables).
func (lc *lifecycle) KeyColumns(ctx context.Context, e change.ExportID) ([]string, error) {
	lc.keyConnMu.Lock()
	defer lc.keyConnMu.Unlock()
	conn, err := lc.keyConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	// Every column, whatever the publication's column list: the names only pick the key out
	// of a Relation message's columns, and a key column the list leaves out must not fail the
	// stream (the copy refuses that table alone).
	t, err := pgcat.LoadTable(ctx, conn, "", e)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, col := range t.Columns {
		if col.Key {
			keys = append(keys, col.Name)
		}
	}
	return keys, nil
}

// UnknownRelation: a table we do not export appeared in the stream; look at the publication.
func (lc *lifecycle) UnknownRelation(e change.ExportID) {
	lc.log.Debug("relation message for a table that is not exported", "export", e.String())
	lc.wakePoll()
}

func sortedExports[V any](m map[change.ExportID]V) []change.ExportID {
	out := make([]change.ExportID, 0, len(m))
	for e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, compareExport)
	return out
}

func compareExport(a, b change.ExportID) int {
	if a.Schema != b.Schema {
		if a.Schema < b.Schema {
			return -1
		}
		return 1
	}
	switch {
	case a.Table < b.Table:
		return -1
	case a.Table > b.Table:
		return 1
	}
	return 0
}

// ExportState is one export as the pipeline sees it now (GET /exports).
type ExportState struct {
	Export change.ExportID `json:"export"`
	Topic  string          `json:"topic"`
	// State is the watermark record's state (hydrating, hydrated, removed, failed); Phase is
	// where the export is in its lifecycle (chunking, copying, ...).
	State watermark.State `json:"state"`
	Phase string          `json:"phase,omitempty"`
	// Watermark is the last watermark published (null: none yet); Position the own position.
	Watermark *change.LSN `json:"watermark"`
	Position  *change.LSN `json:"position"`
	Attempt   int         `json:"snapshot_attempt,omitempty"`
	Rows      int64       `json:"snapshot_rows_copied,omitempty"`
	Estimated int64       `json:"snapshot_rows_estimated,omitempty"`
	// Error is the text of the error that stopped the export; it can quote row values.
	// ErrorClass names its kind without quoting anything (see RedactError).
	Error      string `json:"error,omitempty"`
	ErrorClass string `json:"error_class,omitempty"`
}

// RedactError returns s with its error text replaced by its class and a note that the full text
// needs more privilege (need): for places that must not show row data.
func (s ExportState) RedactError(need string) ExportState {
	if s.Error != "" {
		s.Error = s.ErrorClass + " (" + need + ")"
	}
	return s
}

// states returns every export the tracker knows, sorted by name.
func (lc *lifecycle) states() []ExportState {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	var out []ExportState
	for _, s := range lc.tracker.Status() {
		st := ExportState{Export: s.Export, Topic: s.Topic, State: s.State, Attempt: s.Attempt,
			Rows: s.RowsCopied, Estimated: s.RowsEstimated, Error: s.Err}
		if s.Err != "" {
			st.ErrorClass = cmp.Or(lc.failures[s.Export], FailureUnknown)
		}
		if p := lc.phases[s.Export]; p != 0 {
			st.Phase = p.String()
		}
		if s.HasWatermark {
			w := s.Watermark
			st.Watermark = &w
		}
		if s.HasPosition {
			p := s.Position
			st.Position = &p
		}
		out = append(out, st)
	}
	return out
}
