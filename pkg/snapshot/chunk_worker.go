package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/secret"
)

// worker reads chunks on its own connection, reconnecting after failures.
func (c *Chunker) worker(ctx context.Context, n int) {
	// conn reads the chunks; marks writes their markers: the same connection, or one to the
	// primary when the source is a standby.
	var conn, marks *pgx.Conn
	defer func() {
		closeQuietly(conn)
		if marks != conn {
			closeQuietly(marks)
		}
	}()
	var records []change.Record // the worker's record buffer, kept from chunk to chunk
	backoff := retryMin
	for {
		t, ch, err := c.take(ctx)
		if err != nil {
			return
		}
		if conn == nil || conn.IsClosed() || marks == nil || marks.IsClosed() {
			closeQuietly(conn)
			if marks != conn {
				closeQuietly(marks)
			}
			conn, marks = nil, nil
			conn, err = pgcat.Dial(ctx, workerConfig(c.connConfig, c.cfg.Timeouts))
			marks = conn
			if err == nil && c.primaryConfig != nil {
				if marks, err = pgcat.Dial(ctx, workerConfig(c.primaryConfig, c.cfg.Timeouts)); err != nil {
					err = fmt.Errorf("connect to the primary: %w", secret.ScrubError(err, c.cfg.PrimaryConnString))
				}
			}
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
		if c.cfg.Standby && c.primaryConfig == nil {
			c.done(t, ch, false)
			c.failTable(t, ErrStandbyMarkers)
			continue
		}
		w := &chunkWorker{c: c, conn: conn, marks: marks, records: records}
		ch, err = w.chunk(ctx, t, ch)
		records = w.records
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
			if marks != conn {
				closeQuietly(marks)
			}
			conn, marks = nil, nil
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

// ErrStandbyMarkers fails a chunked copy whose source is a standby without a connection to its
// primary: its markers cannot be written.
var ErrStandbyMarkers = errors.New("a chunked copy from a standby writes its markers on the primary, and there is no connection to it (CDC_PG_PRIMARY_URL)")

// permanentError stops a table's copy for good.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

type chunkWorker struct {
	c    *Chunker
	conn *pgx.Conn
	// marks writes the markers: conn itself, or a connection to the primary when conn is on
	// its standby.
	marks  *pgx.Conn
	fields [][]byte
	// records is the buffer a chunk's rows are read into (room for a full chunk); each chunk
	// hands over a copy of its own size (copy).
	records []change.Record
}

// chunk reads chunk ch of t (one to read again, or t's next, open-ended one) and hands it over.
// It returns the chunk it worked on.
//
// Memory: a chunk holds a claim on Chunker.slots (a full chunk's share from before it is read,
// then what its rows need) until the sink returned it (durable or dropped), and keeps it while it waits to be read again. Chunks are
// published in order, so the earliest chunk not yet published always holds a slot and can go
// on: the slots never run out in a way that blocks it.
func (w *chunkWorker) chunk(ctx context.Context, t *chunkTable, ch *plannedChunk) (*plannedChunk, error) {
	c := w.c
	if ch.slot == nil {
		slot, err := c.slots.Acquire(ctx, slotShares)
		if err != nil {
			return ch, err
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
	// The chunk keeps what its rows need. (Read again, it keeps that share: a range that grew
	// meanwhile may take a little more memory than its share says.)
	ch.slot.Shrink(chunkShare(u.Chunk.Read, u.Bytes(), t.chunkRows))
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
	sql := `SELECT pg_catalog.pg_logical_emit_message(false, $1, $2)::text`
	if w.marks != w.conn && pgcat.ServerMajor(w.marks.PgConn().ParameterStatus("server_version")) >= 17 {
		// Flushed at once (17+): the standby receives only flushed WAL, and the chunk waits
		// for it to replay the low marker.
		sql = `SELECT pg_catalog.pg_logical_emit_message(false, $1, $2, true)::text`
	}
	err := w.marks.QueryRow(ctx, sql, change.MarkerPrefix, change.ChunkMarker(w.c.tag, id, high)).Scan(&lsn)
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
// marker, and the chunk's older row would be published after them. The chunk's snapshot is taken
// once the transactions listed as running after the marker are over. Transactions still running
// after a second without having committed are long-running ones: they commit after the marker,
// whenever they do, and are not waited for.
//
// The wait makes such misses rare; it does not rule them out: pg_snapshot_xip lists only xids
// below the snapshot's xmax, so the newest transaction, committed but still in the proc array, is
// not waited for (TestChunkedHeldCommit), nor is one that spends more than a second between its
// commit record and marking its xid committed, nor one an earlier chunk found long-running
// that commits just before this chunk's marker. What keeps the chunk right is the merge: the
// chunk carries its snapshot (copy, readXidSnapshot), and the replication stage leaves to the
// stream the keys of every transaction it delivered before the low marker that the snapshot
// does not see. That holds for transactions delivered once the copy started; those delivered
// before it (ChunkHooks.Streamed, asked once per copy) were published by nobody, or without
// their keys being noted: a chunk whose snapshot misses one is read again once a new snapshot
// sees it (a commit held by an absent synchronous standby delays the copy until it is let go).
func (w *chunkWorker) read(ctx context.Context, t *chunkTable, ch *plannedChunk, id uint64) (*change.Unit, error) {
	low, err := w.marker(ctx, id, false)
	if err != nil {
		return nil, err
	}
	if w.marks != w.conn {
		// On a standby a transaction becomes visible when its commit record is replayed: once
		// the low marker is replayed, every transaction that committed before it is visible.
		if err := pgcat.WaitReplayed(ctx, w.conn, low); err != nil {
			return nil, fmt.Errorf("wait for the standby to replay the low marker: %w", err)
		}
	} else {
		running, err := w.running(ctx)
		if err != nil {
			return nil, err
		}
		if err := w.waitFor(ctx, running); err != nil {
			return nil, err
		}
	}
	streamed, err := w.streamedOf(ctx, t)
	if err != nil {
		return nil, err
	}
	for {
		u, err := w.readChunk(ctx, t, ch, low)
		if err != nil {
			return nil, err
		}
		missed := unseen(streamed, u.Chunk.Snapshot)
		if len(missed) == 0 {
			return u, nil
		}
		// Committed, streamed before the copy started, and still in the proc array: its
		// changes were not published by the merge. Read the chunk again once it is visible.
		w.c.log.Info("chunk waits for transactions the stream delivered before the copy started that its snapshot does not see",
			slog.String("export", t.job.Export.String()), slog.Int("chunk", ch.seq), slog.Any("xids", missed))
		if err := w.waitSeen(ctx, missed); err != nil {
			return nil, err
		}
	}
}

// readChunk reads ch in its own REPEATABLE READ transaction, after its low marker at low.
func (w *chunkWorker) readChunk(ctx context.Context, t *chunkTable, ch *plannedChunk, low change.LSN) (*change.Unit, error) {
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

// streamedOf returns the xids the stream delivered before t's copy started that a snapshot
// taken now does not see, asking the replication stage once per copy. Every chunk's snapshot is
// taken later and sees what this one sees, so the others cannot matter: the list is the few
// transactions still in the proc array, not the stage's last 65,536.
func (w *chunkWorker) streamedOf(ctx context.Context, t *chunkTable) ([]uint32, error) {
	t.planMu.Lock()
	defer t.planMu.Unlock()
	if !t.hasStreamed {
		snap, err := readXidSnapshot(ctx, w.conn)
		if err != nil {
			return nil, err
		}
		xids, err := w.c.hooks.Streamed(ctx, snap.Xmin)
		if err != nil {
			return nil, fmt.Errorf("transactions streamed before the copy of %s: %w", t.job.Export, err)
		}
		t.streamed, t.hasStreamed = unseen(xids, snap), true
	}
	return t.streamed, nil
}

// unseen returns the xids that snap does not see. An xid that compares far above snap's xmax
// is one from before a wraparound of the 32-bit xids (the stage may keep xids of transactions
// delivered long ago): it committed long ago, and is seen.
func unseen(xids []uint32, snap *change.XidSnapshot) []uint32 {
	var out []uint32
	for _, x := range xids {
		if snap != nil && int32(x-snap.Xmax) >= 1<<30 {
			continue
		}
		if !snap.Sees(x) {
			out = append(out, x)
		}
	}
	return out
}

// waitSeen waits until a new snapshot sees every one of xids (their transactions left the proc
// array).
func (w *chunkWorker) waitSeen(ctx context.Context, xids []uint32) error {
	pause := 10 * time.Millisecond
	for {
		if !sleep(ctx, pause) {
			return ctx.Err()
		}
		snap, err := readXidSnapshot(ctx, w.conn)
		if err != nil {
			return err
		}
		if xids = unseen(xids, snap); len(xids) == 0 {
			return nil
		}
		pause = min(2*pause, time.Second)
	}
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
