package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/secret"
)

// worker is one COPY connection holding the imported snapshot.
type worker struct {
	s      *Stage
	r      *request
	conn   *pgx.Conn
	encs   map[*exportState]*codec.Encoder
	fields [][]byte
}

// openWorker connects and imports the snapshot snapshotID.
func (s *Stage) openWorker(ctx context.Context, snapshotID string) (*pgx.Conn, error) {
	conn, err := pgcat.Dial(ctx, workerConfig(s.connConfig, s.cfg.Timeouts))
	if err != nil {
		return nil, fmt.Errorf("open worker connection: %w", secret.ScrubError(err, s.cfg.ConnString))
	}
	if err := execSimple(ctx, conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		closeQuietly(conn)
		return nil, fmt.Errorf("begin worker transaction: %w", err)
	}
	if err := execSimple(ctx, conn, "SET TRANSACTION SNAPSHOT "+pgcat.Literal(snapshotID)); err != nil {
		closeQuietly(conn)
		return nil, fmt.Errorf("import snapshot %s: %w", snapshotID, err)
	}
	return conn, nil
}

func execSimple(ctx context.Context, conn *pgx.Conn, sql string) error {
	_, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	return err
}

func closeQuietly(conn *pgx.Conn) {
	if conn == nil || conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// run copies ranges from the shared queue until it is empty, then commits.
func (w *worker) run(ctx context.Context) error {
	for t := range w.r.queue {
		if err := ctx.Err(); err != nil {
			return err
		}
		e := w.r.exports[t.Export]
		if e.stopped.Load() {
			continue
		}
		if err := w.copyRange(ctx, e, t.Range); err != nil {
			return err
		}
	}
	if err := execSimple(ctx, w.conn, "COMMIT"); err != nil {
		return fmt.Errorf("commit worker transaction: %w", err)
	}
	return nil
}

// copyRange copies one range of e inside a savepoint, checks for a rewrite while the table lock is
// still held, and rolls the savepoint back to release the lock. Per-export problems stop e and
// return nil; a returned error ends the request.
func (w *worker) copyRange(ctx context.Context, e *exportState, rg Range) error {
	if err := execSimple(ctx, w.conn, "SAVEPOINT tidemark_range"); err != nil {
		return fmt.Errorf("copy %s range %s: savepoint: %w", e.id, rg, err)
	}
	rw := &rowWriter{w: w, e: e, ctx: ctx}
	sql := e.copySQL(rg)
	_, copyErr := w.conn.PgConn().CopyTo(ctx, rw, sql)
	if copyErr == nil && rw.codecErr == nil {
		if len(rw.buf) > 0 {
			return fmt.Errorf("copy %s range %s: stream ended inside a line (%d bytes)", e.id, rg, len(rw.buf))
		}
		copyErr = rw.flush()
	}
	if copyErr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var pgErr *pgconn.PgError
		if !errors.As(copyErr, &pgErr) {
			return fmt.Errorf("copy %s range %s: %w", e.id, rg, copyErr)
		}
		if err := w.releaseRange(ctx); err != nil {
			return fmt.Errorf("copy %s range %s: %w (after %w)", e.id, rg, err, copyErr)
		}
		return w.classifyCopyError(ctx, e, rg, pgErr)
	}
	if rw.codecErr != nil {
		if err := w.releaseRange(ctx); err != nil {
			return fmt.Errorf("copy %s range %s: %w", e.id, rg, err)
		}
		w.r.fail(e, fmt.Errorf("encode snapshot row of %s: %w", e.id, rw.codecErr))
		return nil
	}

	verdict, err := w.checkTable(ctx, e)
	if err != nil {
		return fmt.Errorf("copy %s range %s: %w", e.id, rg, err)
	}
	if err := w.releaseRange(ctx); err != nil {
		return fmt.Errorf("copy %s range %s: %w", e.id, rg, err)
	}
	switch {
	case verdict.gone != "":
		w.r.fail(e, fmt.Errorf("copy %s: %w: %s", e.id, pgcat.ErrTableNotFound, verdict.gone))
		return nil
	case verdict.rewritten != "":
		w.r.restart(e, verdict.rewritten)
		return nil
	}
	if e.remaining.Add(-1) == 0 && !e.stopped.Load() {
		return w.r.done(ctx, e)
	}
	return nil
}

// releaseRange rolls back to the range's savepoint (dropping its locks, keeping the snapshot).
func (w *worker) releaseRange(ctx context.Context) error {
	if err := execSimple(ctx, w.conn, "ROLLBACK TO SAVEPOINT tidemark_range; RELEASE SAVEPOINT tidemark_range"); err != nil {
		return fmt.Errorf("roll back to savepoint: %w", err)
	}
	return nil
}

// tableVerdict is the result of checkTable: empty strings when the copy stands.
type tableVerdict struct {
	gone      string // dropped, renamed or replaced since the snapshot
	rewritten string // rewritten after the consistent point
}

// checkTable compares the table the snapshot knows with the one the server has now.
func (w *worker) checkTable(ctx context.Context, e *exportState) (tableVerdict, error) {
	var (
		snapNode      uint32
		curNode, byNm *uint32
	)
	err := w.conn.QueryRow(ctx, `SELECT c.relfilenode, pg_catalog.pg_relation_filenode(c.oid),
			pg_catalog.to_regclass($2::text)::oid
		FROM pg_catalog.pg_class c WHERE c.oid = $1`, e.table.OID, pgcat.Table(e.id)).Scan(&snapNode, &curNode, &byNm)
	if err != nil {
		return tableVerdict{}, fmt.Errorf("check relfilenode: %w", err)
	}
	switch {
	case byNm == nil:
		return tableVerdict{gone: "dropped or renamed after the snapshot"}, nil
	case *byNm != e.table.OID:
		return tableVerdict{gone: fmt.Sprintf("replaced by another table of the same name (oid %d, was %d)", *byNm, e.table.OID)}, nil
	case e.stats.relkind != "r":
		return tableVerdict{}, nil // partitioned tables have no storage of their own
	case curNode == nil:
		return tableVerdict{gone: "dropped after the snapshot"}, nil
	case *curNode != snapNode:
		return tableVerdict{rewritten: fmt.Sprintf("table rewritten after the consistent point (relfilenode %d -> %d, e.g. by ALTER TABLE or TRUNCATE)", snapNode, *curNode)}, nil
	}
	return tableVerdict{}, nil
}

// classifyCopyError decides what a server error of a range's COPY means for e.
func (w *worker) classifyCopyError(ctx context.Context, e *exportState, rg Range, pgErr *pgconn.PgError) error {
	verdict, err := w.checkTable(ctx, e)
	if err != nil {
		return fmt.Errorf("copy %s range %s: %w (after %w)", e.id, rg, err, pgErr)
	}
	switch {
	case verdict.gone != "":
		w.r.fail(e, fmt.Errorf("copy %s: %w: %s", e.id, pgcat.ErrTableNotFound, verdict.gone))
	case pgErr.Code == "42P01": // undefined_table
		w.r.fail(e, fmt.Errorf("copy %s: %w: %w", e.id, pgcat.ErrTableNotFound, pgErr))
	case pgErr.Code == "42501": // insufficient_privilege
		w.r.fail(e, fmt.Errorf("copy %s: %w (grant SELECT on it to the replication user)", e.id, pgErr))
	case pgErr.Code == "42703": // undefined_column: renamed or dropped after the snapshot
		w.r.restart(e, fmt.Sprintf("columns changed after the consistent point: %s", pgErr.Message))
	default:
		return fmt.Errorf("copy %s range %s: %w", e.id, rg, pgErr)
	}
	return nil
}

// encoder returns this worker's clone of e's encoder.
func (w *worker) encoder(e *exportState) *codec.Encoder {
	enc, ok := w.encs[e]
	if !ok {
		enc = e.enc.Clone()
		w.encs[e] = enc
	}
	return enc
}

// rowWriter receives the COPY stream of one range, cuts it into lines (a line may span CopyData
// messages), encodes each row and sends full batches. It never fails the COPY for a per-export
// problem: that would close the connection and lose the snapshot for the other tables, so it
// discards the rest of the range instead.
type rowWriter struct {
	w        *worker
	e        *exportState
	ctx      context.Context
	buf      []byte // unprocessed bytes: a partial line
	batch    []change.Record
	rows     int
	bytes    int
	discard  bool
	codecErr error
}

func (rw *rowWriter) Write(p []byte) (int, error) {
	if rw.discard {
		return len(p), nil
	}
	var err error
	rw.buf = copyLines(rw.buf, p, func(line []byte) bool {
		err = rw.row(line)
		return err == nil && !rw.discard
	})
	return len(p), err
}

// copyLines appends p, a piece of a COPY text stream, to buf (the partial line carried from
// earlier pieces, which holds no newline), calls fn with each complete line while fn returns
// true, and returns the partial line left, to carry on. p belongs to the connection and the
// lines are decoded in place: fn works on buf's copy. When fn returns false the rest is
// dropped and the returned buffer is empty.
func copyLines(buf, p []byte, fn func(line []byte) bool) []byte {
	from := len(buf)
	buf = append(buf, p...)
	data := buf
	for {
		i := bytes.IndexByte(data[from:], '\n')
		if i < 0 {
			break
		}
		line := data[:from+i]
		data, from = data[from+i+1:], 0
		if !fn(line) {
			return buf[:0]
		}
	}
	return buf[:copy(buf, data)]
}

// row encodes one COPY line. Its error (only the context's) aborts the COPY.
func (rw *rowWriter) row(line []byte) error {
	w, e := rw.w, rw.e
	var (
		fields [][]byte
		err    error
	)
	if len(e.table.Columns) > 0 { // a table without columns sends empty lines
		fields, err = codec.SplitCopyText(line, w.fields[:0])
	}
	if err == nil && len(fields) != len(e.table.Columns) {
		err = fmt.Errorf("copy line has %d fields, want %d", len(fields), len(e.table.Columns))
	}
	if err != nil {
		rw.codecErr, rw.discard = err, true
		return nil
	}
	w.fields = fields
	if rw.batch == nil {
		rw.batch = make([]change.Record, 0, min(w.s.cfg.BatchRows, 256))
	}
	before := len(rw.batch)
	rw.batch, err = w.encoder(e).Read(rw.batch, w.r.source(e), fields)
	if err != nil {
		rw.codecErr, rw.discard = err, true
		return nil
	}
	for i := before; i < len(rw.batch); i++ {
		rw.bytes += rw.batch[i].Size()
	}
	rw.rows++
	if rw.rows >= w.s.cfg.BatchRows || rw.bytes >= w.s.cfg.BatchBytes {
		if err := rw.flush(); err != nil {
			return err
		}
		if e.stopped.Load() {
			rw.discard = true // another worker stopped this export
		}
	}
	return nil
}

// flush sends the pending batch as one KindSnapshot unit.
func (rw *rowWriter) flush() error {
	if rw.rows == 0 && len(rw.batch) == 0 {
		return nil
	}
	u := &change.Unit{
		Kind:    change.KindSnapshot,
		Export:  rw.e.id,
		Attempt: rw.e.attempt,
		Commit:  rw.w.r.c - 1,
		Time:    rw.w.r.start,
		Rows:    rw.rows,
		Records: rw.batch,
	}
	if err := rw.w.r.send(rw.ctx, u); err != nil {
		return err
	}
	rw.e.progress.add(rw.rows, time.Now())
	if l := rw.w.s.cfg.Limiter; l != nil {
		if err := l.WaitN(rw.ctx, min(rw.rows, l.Burst())); err != nil {
			return err
		}
	}
	rw.batch, rw.rows, rw.bytes = nil, 0, 0
	return nil
}

// copySQL is the COPY statement for one range of e.
func (e *exportState) copySQL(rg Range) string {
	var b strings.Builder
	b.WriteString("COPY (SELECT ")
	for i, c := range e.table.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgcat.Ident(c.Name))
	}
	// ONLY: rows of inheritance children belong to other tables (and other exports). A
	// partitioned table has no rows of its own: its partitions are read through it.
	if e.stats.relkind == "p" {
		b.WriteString(" FROM ")
	} else {
		b.WriteString(" FROM ONLY ")
	}
	b.WriteString(pgcat.Table(e.id))
	if p := andFilter(rg.Predicate(), e.table); p != "" {
		b.WriteString(" WHERE ")
		b.WriteString(p)
	}
	b.WriteString(") TO STDOUT")
	return b.String()
}

// andFilter adds t's row filter (the publication's, Table.Published) to the condition cond ("" for
// none): a copy reads only the rows the publication publishes.
func andFilter(cond string, t *change.Table) string {
	f := t.Published.RowFilter
	switch {
	case f == "":
		return cond
	case cond == "":
		return "(" + f + ")"
	}
	return cond + " AND (" + f + ")"
}
