package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/watermark"
)

// reconcileJob is one hydrating export whose copy is durable and whose topic holds rows of
// earlier attempts (a retried snapshot, a table removed and added again).
type reconcileJob struct {
	export change.ExportID
	r      watermark.Reconcile
	// written: the topic's end offsets the sink had written when the copy became durable; the
	// scan reads at least that far (the copy's last rows).
	written map[int32]int64
}

// copyDurable is called when e's copy is durable. When earlier attempts left rows in its topic
// it queues a reconcile, after which the replication stage may release e's hold buffer
// (evReconciled), and returns true; otherwise the caller releases it at once.
func (o *owner) copyDurable(e change.ExportID) bool {
	r, ok := o.tracker.ReconcileRange(e)
	if !ok || !r.Needed() {
		return false
	}
	o.reconcileQ = append(o.reconcileQ, reconcileJob{export: e, r: r, written: o.topics.EndOffsets(r.Topic)})
	return true
}

// reconciler serves the owner's reconcile jobs on its own goroutine and reports each outcome
// as an event: evReconciled, or evFailed for an export that cannot be reconciled.
// keyScanner reads the keys a topic holds (sink.Sink.ScanKeys): what a reconcile deletes.
type keyScanner interface {
	ScanKeys(ctx context.Context, topic string, from, cut, atLeast map[int32]int64, truncate change.Header) (sink.TopicKeys, error)
}

type reconciler struct {
	cfg     Config
	log     *slog.Logger
	connect func(context.Context) (*pgcat.Conn, error)
	codec   codec.Config
	sink    keyScanner
	in      *inbox
}

// run serves jobs until ctx ends. The deletes it publishes go through the same unit channel,
// before the export's held changes (released only afterwards), so a key re-inserted after the
// consistent point is deleted first and inserted again after.
func (c *reconciler) run(ctx context.Context, jobs <-chan reconcileJob, units chan<- *change.Unit) error {
	for {
		var job reconcileJob
		select {
		case <-ctx.Done():
			return ctx.Err()
		case job = <-jobs:
		}
		err := c.reconcile(ctx, job, units)
		if errors.Is(err, pgcat.ErrUnsupportedTable) {
			// E.g. the publication's column list lost a key column since the copy began: the
			// export stops alone (its held changes are dropped).
			c.in.send(ctx, evFailed{e: job.export, err: err})
			continue
		}
		if _, ok := errors.AsType[*sink.RecordError](err); ok {
			// A record the sink never writes: reading it again cannot help.
			return fatal(fmt.Errorf("reconcile %s: %w", job.export, err))
		}
		if err != nil {
			return fmt.Errorf("reconcile %s: %w", job.export, err)
		}
		c.in.send(ctx, evReconciled{e: job.export})
	}
}

func (c *reconciler) reconcile(ctx context.Context, job reconcileJob, units chan<- *change.Unit) error {
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	table, err := pgcat.LoadTable(ctx, conn, c.cfg.Publication, job.export)
	conn.Close(context.Background())
	if err != nil {
		return err
	}
	if len(table.KeyColumns()) == 0 {
		// Keyless rows cannot be matched; their records carry the attempt number instead.
		c.log.Warn("keyless table: rows of earlier snapshot attempts stay in the topic (see source.attempt)", "export", job.export.String())
		return nil
	}
	if err := c.codec.Prepare(ctx, table); err != nil {
		return err
	}
	enc, err := codec.NewEncoder(c.codec, table)
	if err != nil {
		return err
	}

	keys, err := c.sink.ScanKeys(ctx, job.r.Topic, job.r.From, job.r.Until, job.written,
		change.Header{Key: codec.HeaderOp, Value: []byte{byte(change.OpTruncate)}})
	if err != nil {
		return err
	}
	alive, current := keys.Before, keys.After // keys live at the end of the earlier attempts' rows
	src := codec.Source{LSN: job.r.C - 1, Snapshot: true, Attempt: job.r.Attempt}
	var recs []change.Record
	deleted := 0
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		u := &change.Unit{Kind: change.KindSnapshot, Export: job.export, Attempt: job.r.Attempt, Commit: job.r.C - 1, Records: recs}
		recs = nil
		select {
		case units <- u:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for k := range alive {
		if _, ok := current[k]; ok {
			continue
		}
		recs = enc.DeleteKey(recs, src, []byte(k))
		deleted++
		if len(recs) >= 2000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	c.log.Info("reconciled rows of earlier snapshot attempts", "export", job.export.String(), "attempt", job.r.Attempt,
		"earlier_keys", len(alive), "deleted", deleted)
	return nil
}
