// Package wait lets a consumer of Tidemark's topics wait until exports are complete up to a
// PostgreSQL LSN: read-your-writes across PostgreSQL and Kafka.
//
//	// after COMMIT in PostgreSQL:
//	var s string
//	db.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s)
//	lsn, _ := change.ParseLSN(s)
//	w, _ := wait.New([]string{"127.0.0.1:9092"}, "tidemark.__watermarks")
//	defer w.Close()
//	recs, err := w.Until(ctx, lsn, change.ExportID{Schema: "public", Table: "orders"})
//	// every change of public.orders committed before lsn is now below recs[e].Offsets
//
// It reads the watermark topic read-committed from the beginning and keeps following it,
// through watermark.View: the one implementation of the reading rules (own, quiet and
// checkpoint records), which pkg/consumer's cuts rest on too. An export's watermark as a Waiter
// reports it never moves backwards within a copy attempt. For changes in transaction-consistent
// cuts across tables, use pkg/consumer.
package wait

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/kafkaconn"
	"github.com/tidemark/cdc/pkg/watermark"
)

// ErrExportStopped is returned when an awaited export is removed or failed.
var ErrExportStopped = errors.New("export stopped")

// Waiter follows a watermark topic.
type Waiter struct {
	client *kgo.Client
	// view is what the records read so far say: each export's own record, with the quiet
	// record applied where it speaks for the export (watermark.View).
	view *watermark.View
}

// New returns a Waiter reading topic from brokers. Extra kgo options (TLS, SASL) may be given.
func New(brokers []string, topic string, opts ...kgo.Opt) (*Waiter, error) {
	base := []kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}
	cl, err := kafkaconn.NewClient(kafkaconn.Settings{Brokers: brokers}, append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Waiter{client: cl, view: watermark.NewView()}, nil
}

// Close releases the client.
func (w *Waiter) Close() { w.client.Close() }

// Latest returns each export's record as the records read so far say it: its latest own
// record, with the watermark of a later quiet record that speaks for it.
func (w *Waiter) Latest() map[change.ExportID]watermark.Record { return w.view.All() }

// Until blocks until every export has a watermark >= lsn, and returns their records. It fails
// when an export is removed or failed, or when ctx ends.
func (w *Waiter) Until(ctx context.Context, lsn change.LSN, exports ...change.ExportID) (map[change.ExportID]watermark.Record, error) {
	for {
		done := true
		for _, e := range exports {
			r, ok := w.view.Get(e)
			if ok && (r.State == watermark.StateRemoved || r.State == watermark.StateFailed) {
				return nil, fmt.Errorf("%s is %s %s: %w", e, r.State, r.Error, ErrExportStopped)
			}
			if !ok || r.Watermark == nil || *r.Watermark < lsn {
				done = false
			}
		}
		if done {
			out := make(map[change.ExportID]watermark.Record, len(exports))
			for _, e := range exports {
				out[e], _ = w.view.Get(e)
			}
			return out, nil
		}
		if err := w.Poll(ctx); err != nil {
			return nil, err
		}
	}
}

// Poll reads whatever records are available (blocking until at least one arrives or ctx ends)
// and updates Latest.
func (w *Waiter) Poll(ctx context.Context) error { return w.PollRecords(ctx, nil) }

// PollRecords is Poll that also hands fn (when not nil), in order, the record of each export
// that a record read changed: the export's own record, or, for a quiet record, the record of
// every export it speaks for.
func (w *Waiter) PollRecords(ctx context.Context, fn func(watermark.Record)) error {
	fs := w.client.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.Canceled) && ferr == nil {
			ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
		}
	})
	if ferr != nil {
		return ferr
	}
	fs.EachRecord(func(r *kgo.Record) {
		changed, err := w.view.Add(r.Value)
		if err != nil || fn == nil {
			return
		}
		for _, e := range changed {
			rec, _ := w.view.Get(e)
			fn(rec)
		}
	})
	return nil
}
