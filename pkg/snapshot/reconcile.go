package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// ReconcileJob is one hydrating export whose copy is durable and whose topic holds rows of
// earlier attempts (a retried snapshot, a table removed and added again): the keys alive in
// Topic's records from From up to Until that the current attempt's rows (from Until on) lack
// are deleted.
type ReconcileJob struct {
	Export  change.ExportID
	Topic   string
	Attempt int
	// C is the current attempt's consistent point: the deletes are published just below it.
	C change.LSN
	// From: per partition, where earlier attempts' rows start (absent: the beginning); Until:
	// where the current attempt's rows start.
	From, Until map[int32]int64
	// Written: the topic's end offsets the sink had written when the copy became durable; the
	// scan reads at least that far (the copy's last rows).
	Written map[int32]int64
}

// KeyScanner reads the keys a topic holds (the sink's ScanKeys).
type KeyScanner interface {
	ScanKeys(ctx context.Context, topic string, from, cut, atLeast map[int32]int64, truncate change.Header) (change.TopicKeys, error)
}

// ReconcileHooks receive a reconcile's outcome: Reconciled once the deletes are handed over,
// Failed for an export that cannot be reconciled (it stops alone).
type ReconcileHooks interface {
	Reconciled(e change.ExportID)
	Failed(e change.ExportID, err error)
}

// Reconciler deletes from a re-copied export's topic the rows of earlier attempts that the new
// copy lacks. It serves jobs on its own goroutine (Run).
type Reconciler struct {
	Publication string
	// Connect opens a connection to read the table's key.
	Connect func(context.Context) (*pgcat.Conn, error)
	Codec   codec.Config
	Keys    KeyScanner
	Hooks   ReconcileHooks
	Logger  *slog.Logger
}

// Run serves jobs until ctx ends. The deletes go through units, before the export's held
// changes (released only once Hooks.Reconciled is told), so a key re-inserted after the
// consistent point is deleted first and inserted again after. An error other than a table that
// cannot be reconciled ends Run.
func (c *Reconciler) Run(ctx context.Context, jobs <-chan ReconcileJob, units chan<- *change.Unit) error {
	for {
		var job ReconcileJob
		select {
		case <-ctx.Done():
			return ctx.Err()
		case job = <-jobs:
		}
		err := c.reconcile(ctx, job, units)
		if errors.Is(err, pgcat.ErrUnsupportedTable) {
			// E.g. the publication's column list lost a key column since the copy began: the
			// export stops alone (its held changes are dropped).
			c.Hooks.Failed(job.Export, err)
			continue
		}
		if err != nil {
			return fmt.Errorf("reconcile %s: %w", job.Export, err)
		}
		c.Hooks.Reconciled(job.Export)
	}
}

func (c *Reconciler) reconcile(ctx context.Context, job ReconcileJob, units chan<- *change.Unit) error {
	conn, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	table, err := pgcat.LoadTable(ctx, conn, c.Publication, job.Export)
	conn.Close(context.Background())
	if err != nil {
		return err
	}
	if len(table.KeyColumns()) == 0 {
		// Keyless rows cannot be matched; their records carry the attempt number instead.
		c.Logger.Warn("keyless table: rows of earlier snapshot attempts stay in the topic (see source.attempt)", "export", job.Export.String())
		return nil
	}
	if err := c.Codec.Prepare(ctx, table); err != nil {
		return err
	}
	enc, err := codec.NewEncoder(c.Codec, table)
	if err != nil {
		return err
	}
	keys, err := c.Keys.ScanKeys(ctx, job.Topic, job.From, job.Until, job.Written,
		change.Header{Key: codec.HeaderOp, Value: []byte{byte(change.OpTruncate)}})
	if err != nil {
		return err
	}
	alive, current := keys.Before, keys.After // keys live at the end of the earlier attempts' rows
	src := codec.Source{LSN: job.C - 1, Snapshot: true, Attempt: job.Attempt}
	var recs []change.Record
	deleted := 0
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		u := &change.Unit{Kind: change.KindSnapshot, Export: job.Export, Attempt: job.Attempt, Commit: job.C - 1, Records: recs}
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
	c.Logger.Info("reconciled rows of earlier snapshot attempts", "export", job.Export.String(), "attempt", job.Attempt,
		"earlier_keys", len(alive), "deleted", deleted)
	return nil
}
