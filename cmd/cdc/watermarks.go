package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/watermark"
)

// printWatermarks prints one line per export from the watermark topic: state, watermark, lag
// in bytes behind the server's current WAL position, and snapshot progress. It changes nothing.
func printWatermarks(ctx context.Context, cfg pipeline.Config, w io.Writer) error {
	sk, err := sink.New(sink.Config{Brokers: cfg.Sink.Brokers, Security: cfg.Sink.Security, DialTimeout: cfg.ConnectTimeout, Delivery: sink.AtLeastOnce, WatermarkTopic: cfg.Sink.WatermarkTopic, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	defer sk.Close()
	if err := sk.Ping(ctx); err != nil {
		return err
	}
	rd := watermark.NewTopicReader()
	if err := sk.ReadWatermarks(ctx, rd.Add); err != nil {
		return fmt.Errorf("read %s: %w", cfg.Sink.WatermarkTopic, err)
	}
	recs, _ := rd.Result()
	last := make(map[change.ExportID]watermark.Record)
	for _, r := range recs {
		last[r.Export] = r
	}
	var current change.LSN
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if conn, err := pgcat.Connect(cctx, cfg.PGURL, pgcat.Timeouts{Connect: cfg.ConnectTimeout}); err == nil {
		current, _ = pgcat.CurrentWAL(ctx, conn)
		conn.Close(context.Background())
	}
	exports := make([]change.ExportID, 0, len(last))
	for e := range last {
		exports = append(exports, e)
	}
	slices.SortFunc(exports, func(a, b change.ExportID) int { return strings.Compare(a.String(), b.String()) })
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
			if s.Strategy == watermark.StrategyChunked {
				snap = fmt.Sprintf("attempt %d: %d rows in %d chunks", s.Attempt, s.RowsCopied, s.ChunksDone)
			}
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
