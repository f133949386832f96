package pipeline

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/watermark"
)

// PrintWatermarks prints one line per export from the watermark topic: state, watermark, lag
// in bytes behind the server's current WAL position, and snapshot progress. It changes nothing.
func PrintWatermarks(ctx context.Context, cfg Config, w io.Writer) error {
	cfg = cfg.withDefaults()
	sk, err := sink.New(sink.Config{Brokers: cfg.Brokers, Delivery: sink.Delivery(AtLeastOnce), WatermarkTopic: cfg.WatermarkTopic, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	defer sk.Close()
	if err := sk.Ping(ctx); err != nil {
		return err
	}
	values, err := sk.ReadWatermarks(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", cfg.WatermarkTopic, err)
	}
	recs, _, err := decodeWatermarks(values)
	if err != nil {
		return err
	}
	last := make(map[change.ExportID]watermark.Record)
	for _, r := range recs {
		last[r.Export] = r
	}
	var current change.LSN
	if conn, err := connect(ctx, cfg.PGURL); err == nil {
		current, _ = currentWAL(ctx, conn)
		conn.Close(context.Background())
	}
	exports := make([]change.ExportID, 0, len(last))
	for e := range last {
		exports = append(exports, e)
	}
	slices.SortFunc(exports, compareExport)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPORT\tSTATE\tWATERMARK\tLAG_BYTES\tSNAPSHOT\tUPDATED")
	for _, e := range exports {
		r := last[e]
		wm, lag := "-", "-"
		if r.Watermark != nil {
			wm = r.Watermark.String()
			if current >= *r.Watermark && current != 0 {
				lag = fmt.Sprint(uint64(current - *r.Watermark))
			}
		}
		snap := "-"
		if s := r.Snapshot; s != nil {
			snap = fmt.Sprintf("attempt %d: %d rows", s.Attempt, s.RowsCopied)
			switch {
			case s.FinishedAt != nil:
				snap += fmt.Sprintf(" copied in %s", s.FinishedAt.Sub(s.StartedAt).Round(time.Millisecond))
			case s.RowsEstimated > 0:
				snap += fmt.Sprintf(" of ~%d (%.0f%%)", s.RowsEstimated, min(100, 100*float64(s.RowsCopied)/float64(s.RowsEstimated)))
			}
		}
		if r.Error != "" {
			snap += " error: " + r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e, r.State, wm, lag, snap, r.Time.Format("2006-01-02T15:04:05Z07:00"))
	}
	return tw.Flush()
}
