package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/time/rate"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/secret"
)

// ChunkHooks connect a chunked copy with the replication stage, which merges the chunks with
// the stream (the pipeline wires them). None of them blocks.
type ChunkHooks interface {
	// OpenWindow registers chunk id, the seq-th of e's copy, before its low marker is written.
	OpenWindow(id uint64, e change.ExportID, seq int)
	// ChunkRead hands over the chunk's rows (a KindChunk unit) before its high marker is
	// written; the unit's Claim is returned once they are durable or dropped.
	ChunkRead(id uint64, u *change.Unit)
	// AbandonWindow forgets a chunk whose read failed; it is read again under a new id.
	AbandonWindow(id uint64)
	// CopyComplete says every chunk of e's copy was handed over, total of them.
	CopyComplete(e change.ExportID, total int)
	// Failed reports a permanent error of e alone.
	Failed(e change.ExportID, err error)
}

// ChunkJob asks for a chunked copy of Export (attempt Attempt), continuing after the key
// ResumeAfter (nil: from the first key).
type ChunkJob struct {
	Export      change.ExportID
	Attempt     int
	ResumeAfter []string
}

// Chunker copies tables in chunks ("chunked" strategy): each chunk is one key range, read in a
// short transaction of its own between two WAL markers. See the package documentation.
type Chunker struct {
	cfg        Config
	hooks      ChunkHooks
	connConfig *pgx.ConnConfig
	log        *slog.Logger
	metrics    *metrics
	tag        string
	limiter    *rate.Limiter

	mu     sync.Mutex
	tables []*chunkTable
	wake   chan struct{}
	// slots bounds the chunks handed over and not yet durable (their rows are in memory).
	slots  *change.Budget
	nextID atomic.Uint64

	// longMu guards long: transaction ids seen running for longer than a chunk may wait.
	longMu sync.Mutex
	long   map[uint64]bool
}

// NewChunker returns a chunker whose WAL markers carry tag (change.ChunkMarker).
func NewChunker(cfg Config, tag string, hooks ChunkHooks) (*Chunker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("snapshot config: %w", err)
	}
	cc, err := parseConnConfig(cfg.ConnString, cfg.Timeouts)
	if err != nil {
		return nil, fmt.Errorf("snapshot config: %w", err)
	}
	return &Chunker{
		cfg: cfg, hooks: hooks, connConfig: cc, tag: tag,
		log:     cfg.Logger.With(slog.String("stage", "snapshot"), slog.String("strategy", "chunked")),
		metrics: newMetrics(cfg.Registerer),
		limiter: cfg.Limiter,
		wake:    make(chan struct{}, 1),
		slots:   change.NewBudget(int64(2 * cfg.Workers)),
		long:    make(map[uint64]bool),
	}, nil
}

// NewLimiter returns the limiter of CDC_SNAPSHOT_MAX_ROWS_PER_SECOND: perSecond rows per second
// over every copy (nil for 0: unlimited).
func NewLimiter(perSecond int) *rate.Limiter {
	if perSecond <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(perSecond), max(perSecond, maxChunkRows))
}

// Bounds of the rows of one chunk: about chunkBytes of the table's heap each. A chunk's rows
// stay in memory from its read until they are published, in up to 2 × CDC_SNAPSHOT_WORKERS
// chunks: at 1 MiB of heap (encoded rows are about twice that) a 1,000,000-row copy of
// 100-byte rows peaked at 161-171 MiB RSS and took 2.9 s of CPU, against 219-226 MiB and
// 3.6 s with 2 MiB chunks.
const (
	minChunkRows = 1000
	maxChunkRows = 10000
	chunkBytes   = 1 << 20
)

// Add queues a chunked copy; it starts as soon as a worker is free, whatever else is being
// copied. A job for an export already queued replaces it (a re-copy).
func (c *Chunker) Add(job ChunkJob) {
	c.mu.Lock()
	c.tables = slices.DeleteFunc(c.tables, func(t *chunkTable) bool {
		if t.job.Export == job.Export {
			t.stop()
			return true
		}
		return false
	})
	// Unknown size until a worker sets it up: first come.
	c.tables = append(c.tables, &chunkTable{job: job, cursor: job.ResumeAfter, remaining: math.MaxInt64})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Stop stops e's copy (the export failed or left the publication).
func (c *Chunker) Stop(e change.ExportID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tables = slices.DeleteFunc(c.tables, func(t *chunkTable) bool {
		if t.job.Export == e {
			t.stop()
			return true
		}
		return false
	})
}

// chunkTable is one table being copied in chunks.
type chunkTable struct {
	job ChunkJob

	// Set up by the first worker that takes the table (under planMu).
	ready bool
	table *change.Table
	// The range key: the columns chunks are cut by, in index order. It is the table's key when
	// the copy starts and stays the same columns (by attnum) for the whole copy, whatever
	// happens to the key meanwhile, so that chunk ranges never change meaning; the records'
	// key follows the table's current key (enc).
	keyNums  []int16  // attnums
	keyNames []string // names now, quoted
	keyTypes []string // types now (format_type)
	// fingerprint identifies the schema table and enc were made from (schemaFingerprintSQL).
	fingerprint string
	from        string // FROM [ONLY] "schema"."table"
	chunkRows   int
	enc         *codec.Encoder
	progress    *progress
	remaining   int64 // estimated rows left: the largest tables go first
	estimated   int64 // estimated rows of the table

	// planMu serialises planning (boundary queries). Under Chunker.mu: retry, busy, stopped.
	planMu    sync.Mutex
	cursor    []string // the From of the next chunk to plan
	exhausted bool     // the last chunk (To nil) was planned
	nextSeq   int
	retry     []*plannedChunk
	busy      int // chunks taken and not yet handed over
	stopped   bool
	seq       atomic.Int64 // row sequence (codec.Source.Seq)
}

// stop ends t's copy (under Chunker.mu): its chunks waiting for a retry free their slots.
func (t *chunkTable) stop() {
	t.stopped = true
	for _, ch := range t.retry {
		ch.slot.Return()
	}
	t.retry = nil
}

// plannedChunk is one key range of a table with its place in the table's order.
type plannedChunk struct {
	seq  int
	rg   change.KeyRange
	slot *change.Claim // its memory slot while it is not handed over
}

// Run runs the chunker's workers until ctx ends.
func (c *Chunker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := range c.cfg.Workers {
		wg.Go(func() { c.worker(ctx, i) })
	}
	wg.Go(func() { c.tick(ctx) })
	wg.Wait()
	return ctx.Err()
}

// tick logs the progress of copies that published no chunk for a while (slow reads, a sink
// that waits for Kafka), so a long copy reports at least every Config.ProgressInterval.
func (c *Chunker) tick(ctx context.Context) {
	t := time.NewTicker(min(c.cfg.ProgressInterval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.mu.Lock()
			var ps []*progress
			for _, tb := range c.tables {
				if tb.progress != nil {
					ps = append(ps, tb.progress)
				}
			}
			c.mu.Unlock()
			for _, p := range ps {
				p.tick(now)
			}
		}
	}
}

// take returns a table to work on and, when one waits for a retry, the chunk to read; with a
// nil chunk the caller plans the table's next one. It blocks until there is work.
func (c *Chunker) take(ctx context.Context) (*chunkTable, *plannedChunk, error) {
	for {
		c.mu.Lock()
		var best *chunkTable
		for _, t := range c.tables {
			if t.stopped || (t.exhausted && len(t.retry) == 0) {
				continue
			}
			if best == nil || t.remaining > best.remaining {
				best = t
			}
		}
		if best != nil {
			best.busy++
			var ch *plannedChunk
			if n := len(best.retry); n > 0 {
				ch, best.retry = best.retry[0], best.retry[1:]
			}
			c.mu.Unlock()
			return best, ch, nil
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-c.wake:
		case <-time.After(time.Second):
		}
	}
}

// done is called when a worker is done with a chunk of t: handed over (ok) or to be read again.
func (c *Chunker) done(t *chunkTable, ch *plannedChunk, ok bool) {
	c.mu.Lock()
	t.busy--
	if !ok && ch != nil {
		if t.stopped {
			ch.slot.Return()
		} else {
			t.retry = append(t.retry, ch)
		}
	}
	complete := !t.stopped && t.exhausted && t.busy == 0 && len(t.retry) == 0
	if complete {
		t.stopped = true // the copy is over for the chunker
		c.tables = slices.DeleteFunc(c.tables, func(x *chunkTable) bool { return x == t })
	}
	c.mu.Unlock()
	if complete {
		t.progress.finish(time.Now(), "")
		c.hooks.CopyComplete(t.job.Export, t.nextSeq)
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// failTable stops t for good.
func (c *Chunker) failTable(t *chunkTable, err error) {
	c.mu.Lock()
	already := t.stopped
	t.stop()
	c.tables = slices.DeleteFunc(c.tables, func(x *chunkTable) bool { return x == t })
	c.mu.Unlock()
	if !already {
		if t.progress != nil {
			t.progress.finish(time.Now(), err.Error())
		}
		c.hooks.Failed(t.job.Export, err)
	}
}

// worker reads chunks on its own connection, reconnecting after failures.
func (c *Chunker) worker(ctx context.Context, n int) {
	var conn *pgx.Conn
	defer func() { closeQuietly(conn) }()
	backoff := retryMin
	for {
		t, ch, err := c.take(ctx)
		if err != nil {
			return
		}
		if conn == nil || conn.IsClosed() {
			closeQuietly(conn)
			conn, err = pgx.ConnectConfig(ctx, workerConfig(c.connConfig, c.cfg.Timeouts))
			if err != nil {
				c.done(t, ch, false)
				if ctx.Err() != nil {
					return
				}
				c.log.Warn("chunk worker cannot connect; retrying", slog.Int("worker", n),
					slog.Any("error", secret.ScrubError(err, c.cfg.ConnString)), slog.Duration("retry_in", backoff))
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, retryMax)
				continue
			}
		}
		w := &chunkWorker{c: c, conn: conn}
		ch, err = w.chunk(ctx, t, ch)
		var perm *permanentError
		switch {
		case err == nil:
			backoff = retryMin
			c.done(t, ch, true)
		case errors.As(err, &perm):
			c.done(t, ch, false)
			c.failTable(t, perm.err)
		default:
			c.done(t, ch, false)
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("chunk failed; reading it again", slog.String("export", t.job.Export.String()),
				slog.Any("error", err), slog.Duration("retry_in", backoff))
			closeQuietly(conn)
			conn = nil
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, retryMax)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// permanentError stops a table's copy for good.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

type chunkWorker struct {
	c      *Chunker
	conn   *pgx.Conn
	fields [][]byte
}

// chunk reads one chunk of t (ch, a chunk to read again, or the next one planned) and hands it
// over. It returns the chunk it worked on (nil when t had nothing left to plan).
//
// Memory: a chunk holds a slot of Chunker.slots from before it is planned until the replication
// stage published or dropped it, and keeps it while it waits to be read again. Chunks are
// published in order, so the earliest chunk not yet published always holds a slot and can go
// on: the slots never run out in a way that blocks it.
func (w *chunkWorker) chunk(ctx context.Context, t *chunkTable, ch *plannedChunk) (*plannedChunk, error) {
	c := w.c
	if ch == nil {
		slot, err := c.slots.Acquire(ctx, 1)
		if err != nil {
			return nil, err
		}
		if ch, err = w.plan(ctx, t); err != nil || ch == nil {
			slot.Return()
			return nil, err
		}
		ch.slot = slot
	}
	if err := w.ready(ctx, t); err != nil {
		return ch, err
	}
	if c.limiter != nil {
		// Reserve the chunk's rows before reading them: the cap holds for what the primary
		// reads, not for what was handed over.
		if err := c.limiter.WaitN(ctx, min(t.chunkRows, c.limiter.Burst())); err != nil {
			return ch, err
		}
	}
	id := c.nextID.Add(1)
	c.hooks.OpenWindow(id, t.job.Export, ch.seq)
	u, err := w.read(ctx, t, ch, id)
	if err != nil {
		c.hooks.AbandonWindow(id)
		return ch, err
	}
	u.Claim = ch.slot
	c.hooks.ChunkRead(id, u)
	if _, err := w.marker(ctx, id, true); err != nil {
		// The stage drops the rows without freeing the slot: the chunk keeps it for its retry.
		ch.slot = ch.slot.Move()
		c.hooks.AbandonWindow(id)
		return ch, err
	}
	ch.slot = nil
	t.progress.add(u.Chunk.Read, time.Now())
	return ch, nil
}

// marker writes chunk id's low or high marker and returns its WAL position.
func (w *chunkWorker) marker(ctx context.Context, id uint64, high bool) (change.LSN, error) {
	var lsn string
	err := w.conn.QueryRow(ctx, `SELECT pg_catalog.pg_logical_emit_message(false, $1, $2)::text`,
		change.MarkerPrefix, change.ChunkMarker(w.c.tag, id, high)).Scan(&lsn)
	if err != nil {
		return 0, fmt.Errorf("write chunk marker: %w", err)
	}
	return change.ParseLSN(lsn)
}

// read writes the low marker, waits until every transaction that committed before it is
// visible, and reads the chunk in its own REPEATABLE READ transaction.
//
// Why the wait: PostgreSQL writes a commit record before the transaction stops counting as
// running for new snapshots (flush, synchronous replication). A snapshot taken right after the
// low marker may therefore miss a transaction whose changes the stream delivers before the
// marker, and the chunk's older row would be published after them. Every such transaction is in
// the running set of a snapshot taken after the marker; the chunk's snapshot is taken once none
// of them runs any more. Transactions still running after a second without having committed
// are long-running ones: they commit after the marker, whenever they do, and are not waited for.
func (w *chunkWorker) read(ctx context.Context, t *chunkTable, ch *plannedChunk, id uint64) (*change.Unit, error) {
	low, err := w.marker(ctx, id, false)
	if err != nil {
		return nil, err
	}
	running, err := w.running(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.waitFor(ctx, running); err != nil {
		return nil, err
	}
	if err := execSimple(ctx, w.conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return nil, fmt.Errorf("begin chunk transaction: %w", err)
	}
	u, err := w.copy(ctx, t, ch, low)
	if err != nil {
		_ = execSimple(context.WithoutCancel(ctx), w.conn, "ROLLBACK")
		return nil, err
	}
	if err := execSimple(ctx, w.conn, "COMMIT"); err != nil {
		return nil, fmt.Errorf("commit chunk transaction: %w", err)
	}
	return u, nil
}

// running returns the ids of the transactions running now.
func (w *chunkWorker) running(ctx context.Context) ([]uint64, error) {
	var ids []uint64
	err := w.conn.QueryRow(ctx, `SELECT coalesce(array_agg(x::text::int8), '{}') FROM pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot()) x`).Scan(&ids)
	if err != nil {
		return nil, fmt.Errorf("read running transactions: %w", err)
	}
	return ids, nil
}

// waitFor waits until none of ids runs, except long-running transactions that have not
// committed.
func (w *chunkWorker) waitFor(ctx context.Context, ids []uint64) error {
	c := w.c
	c.longMu.Lock()
	ids = slices.DeleteFunc(ids, func(x uint64) bool { return c.long[x] })
	c.longMu.Unlock()
	start := time.Now()
	pause := time.Millisecond
	for len(ids) > 0 {
		now, err := w.running(ctx)
		if err != nil {
			return err
		}
		ids = slices.DeleteFunc(ids, func(x uint64) bool { return !slices.Contains(now, x) })
		if len(ids) == 0 {
			return nil
		}
		if time.Since(start) > time.Second {
			// Those that have not committed are long-running: they commit after the marker.
			var committed []uint64
			err := w.conn.QueryRow(ctx, `SELECT coalesce(array_agg(x), '{}') FROM unnest($1::int8[]) x
				WHERE pg_catalog.pg_xact_status(x::text::xid8) = 'committed'`, ids).Scan(&committed)
			if err != nil {
				return fmt.Errorf("read transaction status: %w", err)
			}
			c.longMu.Lock()
			for _, x := range ids {
				if !slices.Contains(committed, x) {
					c.long[x] = true
				}
			}
			if len(c.long) > 10000 {
				clear(c.long)
			}
			c.longMu.Unlock()
			ids = committed
		}
		if !sleep(ctx, pause) {
			return ctx.Err()
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
	return nil
}

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
	if err := execSimple(ctx, w.conn, "LOCK TABLE "+t.job.Export.Quoted()+" IN ACCESS SHARE MODE"); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return nil, &permanentError{fmt.Errorf("copy %s: %w: %w", t.job.Export, ErrTableNotFound, pgErr)}
		}
		return nil, fmt.Errorf("lock %s: %w", t.job.Export, err)
	}
	var fp string
	err := w.conn.QueryRow(ctx, fingerprintSQL(w.conn), t.oid()).Scan(&fp)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &permanentError{fmt.Errorf("copy %s: %w", t.job.Export, ErrTableNotFound)}
	}
	if err != nil {
		return nil, fmt.Errorf("read schema of %s: %w", t.job.Export, err)
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
	var b strings.Builder
	b.WriteString("COPY (SELECT ")
	for i, col := range table.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(col.Name))
	}
	b.WriteString(t.from)
	t.planMu.Unlock()
	if pred != "" {
		b.WriteString(" WHERE ")
		b.WriteString(pred)
	}
	b.WriteString(") TO STDOUT")

	u := &change.Unit{
		Kind: change.KindChunk, Export: t.job.Export, Attempt: t.job.Attempt, Commit: low,
		Chunk:   &change.Chunk{Seq: ch.seq, Range: ch.rg, Estimated: t.estimated},
		Records: make([]change.Record, 0, t.chunkRows),
	}
	start := time.Now()
	if w.c.cfg.Codec.Now != nil {
		start = w.c.cfg.Codec.Now()
	}
	cw := &chunkWriter{w: w, t: t, u: u, enc: enc.Clone(), cols: len(table.Columns),
		src: codec.Source{LSN: low, Snapshot: true, Attempt: t.job.Attempt, Time: start}}
	_, err = w.conn.PgConn().CopyTo(ctx, cw, b.String())
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
				return nil, &permanentError{fmt.Errorf("copy %s: %w: %w", t.job.Export, ErrTableNotFound, pgErr)}
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
	return u, nil
}

// chunkWriter receives a chunk's COPY stream and encodes its rows into one unit.
type chunkWriter struct {
	w   *chunkWorker
	t   *chunkTable
	u   *change.Unit
	enc *codec.Encoder
	// cols is the number of columns the COPY reads.
	cols int
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
	var (
		fields [][]byte
		err    error
	)
	if cols > 0 {
		fields, err = codec.SplitCopyText(line, cw.w.fields[:0])
	}
	if err == nil && len(fields) != cols {
		err = fmt.Errorf("copy line has %d fields, want %d", len(fields), cols)
	}
	if err != nil {
		cw.err = err
		return
	}
	cw.w.fields = fields
	cw.src.Seq = cw.t.seq.Add(1)
	cw.u.Records, err = cw.enc.Read(cw.u.Records, cw.src, fields)
	if err != nil {
		cw.err = err
		return
	}
	cw.u.Chunk.Read++
}

// plan sets t up on first use and cuts its next chunk: up to chunkRows keys after the cursor.
// It returns nil when the table's last chunk was planned already.
func (w *chunkWorker) plan(ctx context.Context, t *chunkTable) (*plannedChunk, error) {
	t.planMu.Lock()
	defer t.planMu.Unlock()
	if t.exhausted {
		return nil, nil
	}
	if !t.ready {
		if err := w.setup(ctx, t); err != nil {
			return nil, err
		}
	}
	// The key chunkRows keys after the cursor, by the key's index.
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, k := range t.keyNames {
		if i > 0 {
			q.WriteString(", ")
		}
		// Aliased: ORDER BY would take an output column of the key's name, ordering text.
		q.WriteString(k + "::text AS tidemark_bound_" + strconv.Itoa(i))
	}
	q.WriteString(t.from)
	// The publication's row filter too: a chunk holds about chunkRows rows that are copied.
	var after string
	if t.cursor != nil {
		after = t.predicate(change.KeyRange{From: t.cursor})
	}
	if cond := andFilter(after, t.table); cond != "" {
		q.WriteString(" WHERE " + cond)
	}
	q.WriteString(" ORDER BY " + strings.Join(t.keyNames, ", "))
	q.WriteString(" OFFSET " + strconv.Itoa(t.chunkRows-1) + " LIMIT 1")
	rows, err := w.conn.Query(ctx, q.String(), pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, fmt.Errorf("plan chunk of %s: %w", t.job.Export, err)
	}
	bound, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]string, error) {
		out := make([]string, len(t.keyNames))
		ptrs := make([]any, len(out))
		for i := range out {
			ptrs[i] = &out[i]
		}
		return out, r.Scan(ptrs...)
	})
	if err != nil {
		return nil, fmt.Errorf("plan chunk of %s: %w", t.job.Export, err)
	}
	ch := &plannedChunk{seq: t.nextSeq, rg: change.KeyRange{From: t.cursor}}
	if len(bound) > 0 {
		ch.rg.To = bound[0]
	}
	t.nextSeq++
	t.cursor = ch.rg.To
	w.c.mu.Lock()
	t.exhausted = ch.rg.To == nil
	if t.remaining != math.MaxInt64 {
		t.remaining = max(t.remaining-int64(t.chunkRows), 0)
	}
	w.c.mu.Unlock()
	return ch, nil
}

// ready sets t up again after its schema changed (a retried chunk).
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
	err := w.conn.QueryRow(ctx, strings.Replace(fingerprintSQL(w.conn), "c.oid = $1", "c.oid = pg_catalog.to_regclass($1)", 1), e.Quoted()).Scan(&fp)
	if errors.Is(err, pgx.ErrNoRows) {
		return &permanentError{fmt.Errorf("load table %s: %w", e, ErrTableNotFound)}
	}
	if err != nil {
		return fmt.Errorf("read schema of %s: %w", e, err)
	}
	table, err := LoadTable(ctx, w.conn, w.c.cfg.Publication, e)
	if errors.Is(err, ErrTableNotFound) || errors.Is(err, ErrUnsupportedTable) {
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
		return &permanentError{fmt.Errorf("chunked copy of %s: %w: the table has no primary key or replica identity index", e, ErrUnsupportedTable)}
	}
	if err := w.c.cfg.Codec.Prepare(ctx, table); errors.Is(err, codec.ErrTypeNotFound) {
		return &permanentError{fmt.Errorf("snapshot %s: %w", e, err)}
	} else if err != nil {
		return fmt.Errorf("snapshot %s: %w", e, err)
	}
	if err := w.rangeKey(ctx, t, table.OID); err != nil {
		return err
	}
	if t.cursor != nil && len(t.cursor) != len(t.keyNames) {
		return &permanentError{fmt.Errorf("chunked copy of %s: the copy resumes after a key of %d columns, the table's key has %d now (changed while the service was stopped); restart the service to copy the table again",
			e, len(t.cursor), len(t.keyNames))}
	}
	enc, err := codec.NewEncoder(w.c.cfg.Codec, table)
	if err != nil {
		return &permanentError{fmt.Errorf("snapshot %s: %w", e, err)}
	}
	t.table, t.enc, t.fingerprint = table, enc, fp
	t.from = " FROM ONLY " + e.Quoted()
	if st.relkind == "p" {
		t.from = " FROM " + e.Quoted()
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
		t.progress = newProgress(e.String(), st.estimated, w.c.metrics,
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
		nums, names, typs = append(nums, num), append(names, quoteIdent(*name)), append(typs, *typ)
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
		return &permanentError{fmt.Errorf("chunked copy of %s: %w: the table has no primary key or replica identity index", e, ErrUnsupportedTable)}
	}
	t.keyNums, t.keyNames, t.keyTypes = nums, names, typs
	return nil
}

// schemaFingerprintSQL identifies what a chunk's records depend on: the published columns (name,
// type, typmod, in order) and the key (replica identity and its index's columns), and from
// PostgreSQL 15 the column lists and row filters of the table's publications (fingerprintSQL).
// A chunk reads it under its own snapshot; when it differs from the one its table was set up
// with, the schema changed since and the table is set up again before the chunk is read.
const schemaFingerprintSQL = fingerprintColumns + fingerprintFrom

const (
	fingerprintColumns = `SELECT c.relreplident::text || ';' ||
	coalesce((SELECT string_agg(a.attnum || ':' || a.attname || ':' || a.atttypid || ':' || a.atttypmod, ',' ORDER BY a.attnum)
		FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''), '') || ';' ||
	coalesce((SELECT string_agg(i.indkey::text || ':' || i.indisprimary || ':' || i.indisreplident, ',' ORDER BY i.indexrelid)
		FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)), '')`
	fingerprintPublications = ` || ';' ||
	coalesce((SELECT string_agg(pr.prpubid || ':' || coalesce(pr.prattrs::text, '*') || ':' || coalesce(pr.prqual::text, ''), ',' ORDER BY pr.prpubid)
		FROM pg_catalog.pg_publication_rel pr WHERE pr.prrelid = c.oid), '')`
	fingerprintFrom = `
	FROM pg_catalog.pg_class c WHERE c.oid = $1`
)

// fingerprintSQL is schemaFingerprintSQL for the server conn is connected to. From PostgreSQL 15
// it covers the column lists and row filters too: one changed during a chunked copy takes effect
// from the next chunk on, as it does in the stream (the publication poll then copies the table
// again).
func fingerprintSQL(conn *pgx.Conn) string {
	if ServerMajor(conn.PgConn().ParameterStatus("server_version")) < 15 {
		return schemaFingerprintSQL
	}
	return fingerprintColumns + fingerprintPublications + fingerprintFrom
}

// oid is t's table OID (under planMu: set up before any chunk is read).
func (t *chunkTable) oid() uint32 {
	t.planMu.Lock()
	defer t.planMu.Unlock()
	return t.table.OID
}

// predicate is the WHERE condition of the keys in rg ("" for every key).
func (t *chunkTable) predicate(rg change.KeyRange) string {
	var parts []string
	if rg.From != nil {
		parts = append(parts, t.row()+" > "+t.literal(rg.From))
	}
	if rg.To != nil {
		parts = append(parts, t.row()+" <= "+t.literal(rg.To))
	}
	return strings.Join(parts, " AND ")
}

// row is the key columns as a row constructor.
func (t *chunkTable) row() string { return "(" + strings.Join(t.keyNames, ", ") + ")" }

// literal renders key values as a row of typed literals.
func (t *chunkTable) literal(vals []string) string {
	var b strings.Builder
	b.WriteString("(")
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(escapedLiteral(v))
		b.WriteString("::")
		if i < len(t.keyTypes) {
			b.WriteString(t.keyTypes[i])
		} else {
			b.WriteString("text")
		}
	}
	b.WriteString(")")
	return b.String()
}

// escapedLiteral renders s as an E” literal, whatever standard_conforming_strings says.
func escapedLiteral(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "E'" + strings.ReplaceAll(s, "'", "''") + "'"
}
