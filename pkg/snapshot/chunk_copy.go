package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// copy reads ch's rows inside the chunk's transaction and encodes them as snapshot reads at the
// low marker's position.
func (w *chunkWorker) copy(ctx context.Context, t *chunkTable, ch *plannedChunk, low change.LSN) (*change.Unit, error) {
	// The schema as of the chunk's snapshot: a column added, dropped, renamed or retyped, or a
	// new key, since the table was set up is read again, so that the chunk's rows carry the
	// same columns and key as the stream's changes around them.
	//
	// The lock comes first, before the transaction's snapshot: a rewrite (ALTER COLUMN TYPE,
	// a volatile default) committed before it is in the snapshot, and none can commit between
	// the snapshot and the COPY (an older snapshot would see the rewritten table empty).
	if err := execSimple(ctx, w.conn, "LOCK TABLE "+pgcat.Table(t.job.Export)+" IN ACCESS SHARE MODE"); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return nil, &permanentError{fmt.Errorf("copy %s: %w: %w", t.job.Export, pgcat.ErrTableNotFound, pgErr)}
		}
		return nil, fmt.Errorf("lock %s: %w", t.job.Export, err)
	}
	var fp string
	err := w.conn.QueryRow(ctx, fingerprintSQL(w.conn), t.oid()).Scan(&fp)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &permanentError{fmt.Errorf("copy %s: %w", t.job.Export, pgcat.ErrTableNotFound)}
	}
	if err != nil {
		return nil, fmt.Errorf("read schema of %s: %w", t.job.Export, err)
	}
	// The transactions the chunk's snapshot (taken by the query above) sees: the replication
	// stage leaves to the stream the keys of those it delivered before the low marker that the
	// snapshot does not see.
	snap, err := readXidSnapshot(ctx, w.conn)
	if err != nil {
		return nil, err
	}
	t.planMu.Lock()
	if fp != t.fingerprint {
		if err := w.setup(ctx, t); err != nil {
			t.ready = false
			t.planMu.Unlock()
			return nil, err
		}
	}
	table, enc, pred := t.table, t.enc, andFilter(t.predicate(ch.rg), t.table)
	// The range key's values follow the columns: the chunk's end is the last row's key.
	keys, limit := len(t.keyNames), t.chunkRows
	var b strings.Builder
	b.WriteString("COPY (SELECT ")
	for i, col := range table.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgcat.Ident(col.Name))
	}
	for i, k := range t.keyNames {
		if i > 0 || len(table.Columns) > 0 {
			b.WriteString(", ")
		}
		// Aliased: ORDER BY takes an output column of the key's name, and this one is text.
		b.WriteString(k + "::text AS tidemark_bound_" + strconv.Itoa(i))
	}
	b.WriteString(t.from)
	if pred != "" {
		b.WriteString(" WHERE ")
		b.WriteString(pred)
	}
	if ch.open {
		// The chunk's own read finds where it ends: the key's index yields its first limit
		// keys, each row read once (no planning pass over the heap).
		b.WriteString(" ORDER BY " + strings.Join(t.keyNames, ", ") + " LIMIT " + strconv.Itoa(limit))
	}
	t.planMu.Unlock()
	b.WriteString(") TO STDOUT")

	u := &change.Unit{
		Kind: change.KindChunk, Export: t.job.Export, Attempt: t.job.Attempt, Commit: low,
		Chunk:   &change.Chunk{Seq: ch.seq, Estimated: t.estimated, Snapshot: snap},
		Records: w.scratch(limit),
	}
	start := time.Now()
	if w.c.cfg.Codec.Now != nil {
		start = w.c.cfg.Codec.Now()
	}
	cw := &chunkWriter{w: w, t: t, u: u, enc: enc.Clone(), cols: len(table.Columns), last: make([][]byte, keys),
		src: codec.Source{LSN: low, Snapshot: true, Attempt: t.job.Attempt, Time: start}}
	_, err = w.conn.PgConn().CopyTo(ctx, cw, b.String())
	u.Records = w.release(u.Records)
	if err == nil && cw.err == nil && len(cw.buf) > 0 {
		err = fmt.Errorf("stream ended inside a line (%d bytes)", len(cw.buf))
	}
	if err == nil {
		err = cw.err
		if err != nil {
			return nil, &permanentError{fmt.Errorf("encode snapshot row of %s: %w", t.job.Export, err)}
		}
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch pgErr.Code {
			case "42P01": // undefined_table
				return nil, &permanentError{fmt.Errorf("copy %s: %w: %w", t.job.Export, pgcat.ErrTableNotFound, pgErr)}
			case "42501": // insufficient_privilege
				return nil, &permanentError{fmt.Errorf("copy %s: %w (grant SELECT on it to the replication user)", t.job.Export, pgErr)}
			case "42703", "42804", "22P02", "42883": // the table's columns or key changed
				t.planMu.Lock()
				t.ready = false // read its schema again
				t.planMu.Unlock()
			}
		}
		return nil, fmt.Errorf("copy chunk %d of %s: %w", ch.seq, t.job.Export, err)
	}
	u.Rows = u.Chunk.Read
	if ch.open {
		// Every key up to the last one read is in the chunk; fewer rows than the limit: the
		// table ends here (for this snapshot; later rows come through the stream).
		var last []string
		if u.Chunk.Read >= limit {
			last = make([]string, keys)
			for i, v := range cw.last {
				last[i] = string(v)
			}
		}
		w.c.ended(t, ch, last, u.Chunk.Read)
	}
	u.Chunk.Range = ch.rg
	return u, nil
}

// scratch returns the worker's record buffer, empty, with room for n records.
func (w *chunkWorker) scratch(n int) []change.Record {
	if cap(w.records) < n {
		w.records = make([]change.Record, 0, n)
	}
	return w.records[:0]
}

// release returns rows, read into the worker's buffer, in a slice of their own size, and
// clears the buffer (it no longer holds the rows) for the next chunk. A chunk keeps its rows
// until they are durable, and up to 2 × Workers × slotShares small chunks may wait at once: with
// room for a full chunk each (about 1 MB of records), a thousand 10-row tables had the heap at
// 370 MB.
func (w *chunkWorker) release(rows []change.Record) []change.Record {
	out := slices.Clone(rows)
	clear(rows)
	if cap(rows) >= cap(w.records) {
		w.records = rows[:0]
	}
	return out
}

// chunkWriter receives a chunk's COPY stream and encodes its rows into one unit.
type chunkWriter struct {
	w   *chunkWorker
	t   *chunkTable
	u   *change.Unit
	enc *codec.Encoder
	// cols is the number of the table's columns the COPY reads; the range key's follow them.
	cols int
	// last holds the range key of the last row read.
	last [][]byte
	src  codec.Source
	buf  []byte
	err  error
}

func (cw *chunkWriter) Write(p []byte) (int, error) {
	if cw.err == nil {
		cw.buf = copyLines(cw.buf, p, func(line []byte) bool {
			cw.row(line)
			return cw.err == nil
		})
	}
	return len(p), nil
}

func (cw *chunkWriter) row(line []byte) {
	cols := cw.cols
	fields, err := codec.SplitCopyText(line, cw.w.fields[:0])
	if err == nil && len(fields) != cols+len(cw.last) {
		err = fmt.Errorf("copy line has %d fields, want %d", len(fields), cols+len(cw.last))
	}
	if err != nil {
		cw.err = err
		return
	}
	cw.w.fields = fields
	for i, f := range fields[cols:] {
		cw.last[i] = append(cw.last[i][:0], f...)
	}
	cw.src.Seq = cw.t.seq.Add(1)
	cw.u.Records, err = cw.enc.Read(cw.u.Records, cw.src, fields[:cols])
	if err != nil {
		cw.err = err
		return
	}
	cw.u.Chunk.Read++
}
