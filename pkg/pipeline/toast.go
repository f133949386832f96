package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// toastWarnings tells the user, once per process and table, when a published table's updates
// may arrive without some values: PostgreSQL does not send a large out-of-line (TOASTed) value
// that an update left unchanged, unless the table's replica identity is FULL.
type toastWarnings struct {
	mu     sync.Mutex
	warned map[change.ExportID]bool
}

// check warns for each table of published not warned about yet whose columns PostgreSQL may
// store out of line (variable length, storage other than plain) and whose replica identity is
// not FULL. A catalog error is logged and skipped: the warning is advice, not a precondition.
func (w *toastWarnings) check(ctx context.Context, conn *pgx.Conn, cfg Config, published map[change.ExportID]struct{}, log *slog.Logger) {
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
	// Only the columns the publication publishes (PostgreSQL 15 column lists).
	listed := ""
	if snapshot.ServerMajor(conn.PgConn().ParameterStatus("server_version")) >= 15 {
		listed = " AND (pt.attnames IS NULL OR a.attname = ANY (pt.attnames))"
	}
	rows, err := conn.Query(ctx, `
		SELECT pt.schemaname::text, pt.tablename::text, array_agg(a.attname::text ORDER BY a.attnum)
		FROM pg_publication_tables pt
		JOIN pg_namespace n ON n.nspname = pt.schemaname
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
			AND a.attlen = -1 AND a.attstorage <> 'p' AND a.attgenerated = ''`+listed+`
		WHERE pt.pubname = $1 AND c.relreplident <> 'f'
		GROUP BY 1, 2`, cfg.Publication)
	if err != nil {
		log.Debug("could not look for out-of-line columns", "err", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var e change.ExportID
		var cols []string
		if err := rows.Scan(&e.Schema, &e.Table, &cols); err != nil {
			log.Debug("could not look for out-of-line columns", "err", err)
			return
		}
		if w.warned[e] {
			continue
		}
		got := "the record leaves the column out of \"after\" and names it in the tidemark.unchanged header (CDC_UNCHANGED_TOAST=omit), so a consumer must merge the update into the row it has"
		if cfg.UnchangedToast == UnchangedPlaceholder {
			got = fmt.Sprintf("the record carries the placeholder %q as the column's value and names the column in the tidemark.unchanged header (CDC_UNCHANGED_TOAST=placeholder)", cfg.UnchangedPlaceholder)
		}
		log.Warn(fmt.Sprintf("table %s has columns PostgreSQL may store out of line (TOAST); an update that leaves such a value unchanged does not send it, and %s. For complete rows in every update run ALTER TABLE %s REPLICA IDENTITY FULL (more WAL per update)",
			e, got, e.Quoted()), "export", e.String(), "columns", cols)
	}
	if rows.Err() != nil {
		log.Debug("could not look for out-of-line columns", "err", rows.Err())
		return
	}
	for e := range published {
		w.warned[e] = true
	}
}
