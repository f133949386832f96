package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// coordinator owns the watermark tracker and connects the stages' callbacks to it. It
// implements sink.Progress, replication.Hooks and snapshot.Hooks.
type coordinator struct {
	mu      sync.Mutex
	tracker *watermark.Tracker
	// startLSN is the slot's confirmed position at start-up: confirmable until the tracker
	// knows better.
	startLSN change.LSN

	cfg   Config
	log   *slog.Logger
	sink  *sink.Sink
	repl  *replication.Stage
	// chunker runs the chunked copies.
	chunker *snapshot.Chunker
	topic func(change.ExportID) string
	// rehydrate asks the poller to hydrate an export again (snapshot restart).
	rehydrate func(change.ExportID)
	// pollNow asks the poller to look at the publication now.
	pollNow func()
	// keyColumns loads key columns of a table (replica identity FULL).
	keyConn   func(ctx context.Context) (*pgx.Conn, error)
	keyConnMu sync.Mutex
	// codec encodes reconcile deletes. reconciles (under mu) are the exports to reconcile, in
	// order; reconcileSig (capacity 1) says it is not empty. Queuing never blocks: it happens
	// in the sink's Committed.
	codec        codec.Config
	reconciles   []reconcileJob
	reconcileSig chan struct{}
	// copied: exports whose copy became durable in the batch not yet committed.
	copied []change.ExportID
}

var (
	_ sink.Progress     = (*coordinator)(nil)
	_ replication.Hooks = (*coordinator)(nil)
	_ snapshot.Hooks      = (*coordinator)(nil)
	_ snapshot.ChunkHooks = (*coordinator)(nil)
)

// Durable applies units the sink made durable, in order, and returns the watermark records due.
func (c *coordinator) Durable(units []*change.Unit, offsets sink.Offsets) []change.Record {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, u := range units {
		switch u.Kind {
		case change.KindTxn, change.KindProgress:
			c.tracker.Advance(u.End)
		case change.KindSnapshot:
			c.tracker.SnapshotRows(u.Export, int64(u.Rows))
		case change.KindSnapshotDone:
			c.tracker.SnapshotCopied(u.Export, now)
			// Acted on once committed: reconciling reads the topic read-committed.
			c.copied = append(c.copied, u.Export)
		case change.KindHydrated:
			c.tracker.Hydrated(u.Export, u.End)
		case change.KindRemoved:
			c.tracker.Removed(u.Export, u.End)
		case change.KindFailed:
			c.tracker.Failed(u.Export, u.Err)
			c.chunker.Stop(u.Export)
		case change.KindChunk:
			c.tracker.ChunkDone(u.Export, u.Chunk, now)
		}
		if u.Release != nil {
			u.Release()
			u.Release = nil
		}
	}
	recs := c.tracker.Due(now, func(topic string) map[int32]int64 { return offsets[topic] })
	out := make([]change.Record, 0, len(recs))
	for _, r := range recs {
		v, err := watermark.Encode(r)
		if err != nil {
			c.log.Error("encode watermark record", "export", r.Export.String(), "err", err)
			continue
		}
		out = append(out, change.Record{Topic: c.cfg.WatermarkTopic, Partition: change.AnyPartition, Key: r.Key(), Value: v})
	}
	// After Due: the records above carry every state transition up to this point, so the
	// checkpoint applies to exactly the exports they (or earlier records) say are hydrated.
	// (In exactly-once mode Carry wrote it already, into the same transaction.)
	if lsn, ok := c.tracker.Checkpoint(); ok {
		out = c.appendCheckpoint(out, lsn, now)
	}
	return out
}

// Carry returns the checkpoint of an exactly-once transaction, produced with its units: the end
// of its last stream unit. Durable, called before the same transaction commits, adds the
// watermark records of every state transition, so the checkpoint covers the same exports as if
// it were written after them.
func (c *coordinator) Carry(units []*change.Unit) []change.Record {
	var end change.LSN
	for _, u := range units {
		if u.Kind == change.KindTxn || u.Kind == change.KindProgress {
			end = max(end, u.End)
		}
	}
	if end == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	lsn, ok := c.tracker.CheckpointAt(end)
	if !ok {
		return nil
	}
	return c.appendCheckpoint(nil, lsn, time.Now())
}

func (c *coordinator) appendCheckpoint(out []change.Record, lsn change.LSN, now time.Time) []change.Record {
	v, err := watermark.EncodeCheckpoint(lsn, now)
	if err != nil {
		c.log.Error("encode checkpoint", "lsn", lsn.String(), "err", err)
		return out
	}
	return append(out, change.Record{Topic: c.cfg.WatermarkTopic, Partition: change.AnyPartition, Key: []byte(watermark.CheckpointKey), Value: v})
}

// Committed marks the last records durable.
func (c *coordinator) Committed() {
	c.mu.Lock()
	c.tracker.Published()
	for _, e := range c.copied {
		c.copyDurable(e)
	}
	c.copied = c.copied[:0]
	c.mu.Unlock()
}

// Confirmable is what the slot may confirm.
func (c *coordinator) Confirmable() (change.LSN, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lsn, ok := c.tracker.Confirmable(); ok {
		return max(lsn, c.startLSN), true
	}
	return c.startLSN, c.startLSN != 0
}

// KeyColumns loads the key columns of e (replica identity FULL tables).
func (c *coordinator) KeyColumns(ctx context.Context, e change.ExportID) ([]string, error) {
	c.keyConnMu.Lock()
	defer c.keyConnMu.Unlock()
	conn, err := c.keyConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	t, err := snapshot.LoadTable(ctx, conn, e)
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
func (c *coordinator) UnknownRelation(e change.ExportID) {
	c.log.Debug("relation message for a table that is not exported", "export", e.String())
	c.pollNow()
}

// Begin records the start of a snapshot attempt for each table and tells the replication
// stage the consistent point.
func (c *coordinator) Begin(ctx context.Context, lsn change.LSN, tables []snapshot.TableInfo) (map[change.ExportID]int, error) {
	specs := make([]sink.TopicSpec, 0, len(tables))
	exports := make([]change.ExportID, 0, len(tables))
	for _, t := range tables {
		specs = append(specs, sink.TopicSpec{Name: c.topic(t.Table.Export), Compact: len(t.Table.KeyColumns()) > 0})
		exports = append(exports, t.Table.Export)
	}
	if err := c.sink.EnsureTopics(ctx, specs); err != nil {
		return nil, err
	}
	if err := c.repl.SetConsistentPoint(ctx, exports, lsn); err != nil {
		return nil, err
	}
	now := time.Now()
	attempts := make(map[change.ExportID]int, len(tables))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range tables {
		e := t.Table.Export
		topic := c.topic(e)
		attempts[e] = c.tracker.StartHydration(e, topic, lsn, t.EstimatedRows, c.sink.EndOffsets(topic), now)
		c.log.Info("snapshot started", "export", e.String(), "consistent_point", lsn.String(), "attempt", attempts[e], "estimated_rows", t.EstimatedRows)
	}
	return attempts, nil
}

// holding: the replication stage is about to hold exports' changes for a new snapshot.
func (c *coordinator) holding(exports []change.ExportID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range exports {
		c.tracker.Holding(e)
	}
}

// Restart: the table was rewritten during its copy; hold its changes again and re-snapshot.
func (c *coordinator) Restart(e change.ExportID, reason string) {
	c.log.Warn("restarting snapshot", "export", e.String(), "reason", reason)
	c.repl.Restart(e)
	c.rehydrate(e)
}

// Failed stops e alone.
func (c *coordinator) Failed(e change.ExportID, err error) {
	c.log.Error("export failed", "export", e.String(), "err", err)
	c.repl.Fail(e)
	c.chunker.Stop(e)
	c.mu.Lock()
	c.tracker.Failed(e, err.Error())
	c.mu.Unlock()
}

// status returns the tracker's view (for metrics and logs).
func (c *coordinator) status() []watermark.ExportStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tracker.Status()
}

// Chunked copies: the chunker's hooks go to the replication stage, which merges the chunks
// with the stream.

func (c *coordinator) OpenWindow(id uint64, e change.ExportID, seq int) { c.repl.OpenWindow(id, e, seq) }
func (c *coordinator) ChunkRead(id uint64, u *change.Unit, release func()) {
	c.repl.ChunkRead(id, u, release)
}
func (c *coordinator) AbandonWindow(id uint64)                   { c.repl.AbandonWindow(id) }
func (c *coordinator) CopyComplete(e change.ExportID, total int) { c.repl.CopyComplete(e, total) }

// startChunked starts a chunked copy of each of exports that can take one (chunked strategy,
// a key, nothing to reconcile) and returns the others, which take a copy. conn reads their
// schemas.
func (c *coordinator) startChunked(ctx context.Context, conn *pgx.Conn, exports []change.ExportID) ([]change.ExportID, error) {
	if c.cfg.SnapshotStrategy != StrategyChunked {
		return exports, nil
	}
	var rest, chunked []change.ExportID
	var specs []sink.TopicSpec
	for _, e := range exports {
		t, err := snapshot.LoadTable(ctx, conn, e)
		if err != nil {
			// Missing or unsupported: the copy path reports it for this export alone.
			rest = append(rest, e)
			continue
		}
		c.mu.Lock()
		can := c.tracker.CanChunk(e)
		c.mu.Unlock()
		if len(t.KeyColumns()) == 0 || !can {
			rest = append(rest, e)
			continue
		}
		chunked = append(chunked, e)
		specs = append(specs, sink.TopicSpec{Name: c.topic(e), Compact: true})
	}
	if len(chunked) == 0 {
		return rest, nil
	}
	if err := c.sink.EnsureTopics(ctx, specs); err != nil {
		return nil, err
	}
	for _, e := range chunked {
		topic := c.topic(e)
		c.mu.Lock()
		attempt := c.tracker.StartChunked(e, topic, 0, c.sink.EndOffsets(topic), time.Now())
		c.mu.Unlock()
		if err := c.repl.StartChunking(ctx, e); err != nil {
			return nil, err
		}
		c.chunker.Add(snapshot.ChunkJob{Export: e, Attempt: attempt})
		c.log.Info("chunked copy started", "export", e.String(), "attempt", attempt)
	}
	return rest, nil
}

// errUnknownExport: a re-copy of a table that is not exported.
var errUnknownExport = errors.New("not an exported table")

// resnapshot copies e again (a consumer lost its state): its rows are published again, with
// the copy strategy e takes, and rows its topic holds that the table no longer has are deleted
// as for any re-added table. e must be hydrated.
func (c *coordinator) resnapshot(e change.ExportID) error {
	c.mu.Lock()
	var st *watermark.ExportStatus
	for _, s := range c.tracker.Status() {
		if s.Export == e && !s.Restored {
			st = &s
			break
		}
	}
	c.mu.Unlock()
	switch {
	case st == nil:
		return fmt.Errorf("%s: %w", e, errUnknownExport)
	case st.State != watermark.StateHydrated:
		return fmt.Errorf("%s is %s, not hydrated: only a hydrated table can be copied again", e, st.State)
	}
	c.rehydrate(e)
	return nil
}
