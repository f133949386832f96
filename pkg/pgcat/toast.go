package pgcat

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// ToastWarnings tells the user, once per process and table, when a published table's updates
// may arrive without some values: PostgreSQL does not send a large out-of-line (TOASTed) value
// that an update left unchanged, unless the table's replica identity is FULL. The zero value is
// ready; it is safe for concurrent use.
type ToastWarnings struct {
	mu     sync.Mutex
	warned map[change.ExportID]bool
}

// Check warns for each table of published (publication pub) not warned about yet whose columns
// PostgreSQL may store out of line (OutOfLineColumns); unchanged and placeholder say what the
// records carry for such a value (CDC_UNCHANGED_TOAST, CDC_UNCHANGED_PLACEHOLDER). A catalog
// error is logged and skipped: the warning is advice, not a precondition.
func (w *ToastWarnings) Check(ctx context.Context, conn Querier, pub string, unchanged codec.Unchanged, placeholder string, published map[change.ExportID]struct{}, log *slog.Logger) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.warned == nil {
		w.warned = make(map[change.ExportID]bool)
	}
	news := false
	for e := range published {
		if !w.warned[e] {
			news = true
			break
		}
	}
	if !news {
		return
	}
	tables, err := OutOfLineColumns(ctx, conn, pub)
	if err != nil {
		log.Debug("could not look for out-of-line columns", "err", err)
		return
	}
	var fresh []change.ExportID
	for e, cols := range tables {
		if w.warned[e] {
			continue
		}
		fresh = append(fresh, e)
		log.Debug("table has columns PostgreSQL may store out of line (TOAST)", "export", e.String(), "columns", cols)
	}
	if len(fresh) > 0 {
		got := "the record leaves the column out of \"after\" and names it in the tidemark.unchanged header (CDC_UNCHANGED_TOAST=omit), so a consumer must merge the update into the row it has"
		if unchanged == codec.UnchangedPlaceholder {
			got = fmt.Sprintf("the record carries the placeholder %q as the column's value and names the column in the tidemark.unchanged header (CDC_UNCHANGED_TOAST=placeholder)", placeholder)
		}
		// One line for every table that shares the advice (a publication of thousands would
		// otherwise open the log with thousands of lines); the columns of each are at DEBUG.
		slices.SortFunc(fresh, func(a, b change.ExportID) int { return strings.Compare(a.String(), b.String()) })
		names := make([]string, 0, 5)
		for _, e := range fresh[:min(5, len(fresh))] {
			names = append(names, e.String())
		}
		example := Table(fresh[0])
		log.Warn(fmt.Sprintf("%d published table(s) have columns PostgreSQL may store out of line (TOAST); an update that leaves such a value unchanged does not send it, and %s. For complete rows in every update run ALTER TABLE ... REPLICA IDENTITY FULL on them (more WAL per update), e.g. ALTER TABLE %s REPLICA IDENTITY FULL",
			len(fresh), got, example), "tables", len(fresh), "first", names)
	}
	for e := range published {
		w.warned[e] = true
	}
}
