package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// toastWarnings tells the user, once per process and table, when a published table's updates
// may arrive without some values: PostgreSQL does not send a large out-of-line (TOASTed) value
// that an update left unchanged, unless the table's replica identity is FULL.
type toastWarnings struct {
	mu     sync.Mutex
	warned map[change.ExportID]bool
}

// check warns for each table of published not warned about yet whose columns PostgreSQL may
// store out of line (pgcat.OutOfLineColumns). A catalog error is logged and skipped: the
// warning is advice, not a precondition.
func (w *toastWarnings) check(ctx context.Context, conn pgcat.Querier, cfg Config, published map[change.ExportID]struct{}, log *slog.Logger) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.warned == nil {
		w.warned = make(map[change.ExportID]bool)
	}
	fresh := false
	for e := range published {
		if !w.warned[e] {
			fresh = true
			break
		}
	}
	if !fresh {
		return
	}
	tables, err := pgcat.OutOfLineColumns(ctx, conn, cfg.Publication)
	if err != nil {
		log.Debug("could not look for out-of-line columns", "err", err)
		return
	}
	for e, cols := range tables {
		if w.warned[e] {
			continue
		}
		got := "the record leaves the column out of \"after\" and names it in the tidemark.unchanged header (CDC_UNCHANGED_TOAST=omit), so a consumer must merge the update into the row it has"
		if cfg.UnchangedToast == codec.UnchangedPlaceholder {
			got = fmt.Sprintf("the record carries the placeholder %q as the column's value and names the column in the tidemark.unchanged header (CDC_UNCHANGED_TOAST=placeholder)", cfg.UnchangedPlaceholder)
		}
		log.Warn(fmt.Sprintf("table %s has columns PostgreSQL may store out of line (TOAST); an update that leaves such a value unchanged does not send it, and %s. For complete rows in every update run ALTER TABLE %s REPLICA IDENTITY FULL (more WAL per update)",
			e, got, pgcat.Table(e)), "export", e.String(), "columns", cols)
	}
	for e := range published {
		w.warned[e] = true
	}
}
