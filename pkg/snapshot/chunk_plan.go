package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// ready sets t up on first use, and again after its schema changed (a retried chunk).
func (w *chunkWorker) ready(ctx context.Context, t *chunkTable) error {
	t.planMu.Lock()
	defer t.planMu.Unlock()
	if t.ready {
		return nil
	}
	return w.setup(ctx, t)
}

// setup reads t's schema, key (in index order) and size.
func (w *chunkWorker) setup(ctx context.Context, t *chunkTable) error {
	e := t.job.Export
	// The fingerprint first: a change committed between it and LoadTable (outside a chunk's
	// transaction) shows as a changed schema at the next chunk.
	var fp string
	err := w.conn.QueryRow(ctx, strings.Replace(fingerprintSQL(w.conn), "c.oid = $1", "c.oid = pg_catalog.to_regclass($1)", 1), pgcat.Table(e)).Scan(&fp)
	if errors.Is(err, pgx.ErrNoRows) {
		return &permanentError{fmt.Errorf("load table %s: %w", e, pgcat.ErrTableNotFound)}
	}
	if err != nil {
		return fmt.Errorf("read schema of %s: %w", e, err)
	}
	table, err := pgcat.LoadTable(ctx, w.conn, w.c.cfg.Publication, e)
	if errors.Is(err, pgcat.ErrTableNotFound) || errors.Is(err, pgcat.ErrUnsupportedTable) {
		return &permanentError{err}
	}
	if err != nil {
		return err
	}
	st, err := loadStats(ctx, w.conn, table.OID)
	if err != nil {
		return fmt.Errorf("read size of %s: %w", e, err)
	}
	if !st.canSelect {
		return &permanentError{fmt.Errorf("snapshot %s: permission denied (grant SELECT on it to the replication user)", e)}
	}
	if len(table.KeyColumns()) == 0 {
		return &permanentError{fmt.Errorf("chunked copy of %s: %w: the table has no primary key or replica identity index", e, pgcat.ErrUnsupportedTable)}
	}
	if err := w.c.cfg.Codec.Prepare(ctx, table); errors.Is(err, codec.ErrTypeNotFound) || errors.Is(err, codec.ErrSchemaRefused) {
		return &permanentError{fmt.Errorf("snapshot %s: %w", e, err)}
	} else if err != nil {
		return fmt.Errorf("snapshot %s: %w", e, err)
	}
	if err := w.rangeKey(ctx, t, table.OID); err != nil {
		return err
	}
	if r := t.job.ResumeAfter; r != nil && len(r) != len(t.keyNames) {
		return &permanentError{fmt.Errorf("chunked copy of %s: the copy resumes after a key of %d columns, the table's key has %d now (changed while the service was stopped); restart the service to copy the table again",
			e, len(r), len(t.keyNames))}
	}
	enc, err := codec.NewEncoder(w.c.cfg.Codec, table)
	if err != nil {
		return &permanentError{fmt.Errorf("snapshot %s: %w", e, err)}
	}
	t.table, t.enc, t.fingerprint = table, enc, fp
	t.from = " FROM ONLY " + pgcat.Table(e)
	if st.relkind == "p" {
		t.from = " FROM " + pgcat.Table(e)
	}
	width := int64(0)
	if st.estimated > 0 && st.blocks > 0 {
		width = st.blocks * st.blockSize / st.estimated
	}
	t.chunkRows = w.c.cfg.ChunkRows
	if t.chunkRows <= 0 {
		t.chunkRows = maxChunkRows
		if width > 0 {
			t.chunkRows = int(min(max(chunkBytes/width, minChunkRows), maxChunkRows))
		}
	}
	t.estimated = st.estimated
	w.c.mu.Lock()
	if t.progress == nil {
		t.progress = newProgress(e.String(), st.estimated, w.c.metrics, w.c.notices,
			w.c.log.With(slog.Int("attempt", t.job.Attempt)), w.c.cfg.ProgressInterval, time.Now())
		t.remaining = st.estimated
	}
	w.c.mu.Unlock()
	t.ready = true
	return nil
}

// rangeKey reads t's range key: on first use the key columns of the table (replica identity
// index or primary key), afterwards the current names and types of the same columns. A range key
// column dropped during the copy stops it: its chunks cannot be cut any more.
func (w *chunkWorker) rangeKey(ctx context.Context, t *chunkTable, oid uint32) error {
	e := t.job.Export
	var (
		rows pgx.Rows
		err  error
	)
	if t.keyNums == nil {
		rows, err = w.conn.Query(ctx, `SELECT a.attnum, a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod)
			FROM pg_catalog.pg_class c
			JOIN pg_catalog.pg_index i ON i.indrelid = c.oid
				AND CASE c.relreplident WHEN 'i' THEN i.indisreplident ELSE i.indisprimary END
			CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
			JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
			WHERE c.oid = $1 AND c.relreplident <> 'n'
			ORDER BY k.ord`, oid)
	} else {
		rows, err = w.conn.Query(ctx, `SELECT k.attnum, a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod)
			FROM unnest($2::int2[]) WITH ORDINALITY AS k(attnum, ord)
			LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = $1 AND a.attnum = k.attnum AND NOT a.attisdropped
			ORDER BY k.ord`, oid, t.keyNums)
	}
	if err != nil {
		return fmt.Errorf("read key of %s: %w", e, err)
	}
	var (
		nums        []int16
		names, typs []string
		num         int16
		name, typ   *string
	)
	_, err = pgx.ForEachRow(rows, []any{&num, &name, &typ}, func() error {
		if name == nil || typ == nil {
			return &permanentError{fmt.Errorf("chunked copy of %s: a key column it is cut by was dropped during the copy; restart the service to copy the table again", e)}
		}
		nums, names, typs = append(nums, num), append(names, pgcat.Ident(*name)), append(typs, *typ)
		return nil
	})
	var perm *permanentError
	if errors.As(err, &perm) {
		return perm
	}
	if err != nil {
		return fmt.Errorf("read key of %s: %w", e, err)
	}
	if len(nums) == 0 {
		return &permanentError{fmt.Errorf("chunked copy of %s: %w: the table has no primary key or replica identity index", e, pgcat.ErrUnsupportedTable)}
	}
	t.keyNums, t.keyNames, t.keyTypes = nums, names, typs
	return nil
}
