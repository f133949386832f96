package snapshot

// The chunked copy, by responsibility: this file holds the hooks, the job and the Chunker's
// public API; chunk_schedule.go hands tables and chunks to workers; chunk_worker.go reads one
// chunk between its WAL markers; chunk_copy.go reads a chunk, finds where it ends, and encodes
// its COPY stream; chunk_plan.go sets a table up; chunk_sql.go renders the SQL.

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"golang.org/x/time/rate"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
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
	// Streamed returns the xids of the transactions the stream delivered so far (the recent
	// ones) not below from (a snapshot's xmin, in the xids' circular order), once the commands
	// sent to it before are applied: a chunk of a copy is read again until its snapshot sees
	// those of them that were delivered before the copy started.
	Streamed(ctx context.Context, from uint32) ([]uint32, error)
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
// short transaction of its own between two WAL markers. There is no planning pass: a chunk reads
// up to chunkRows keys after the previous chunk's last key, in key order, and ends at the last
// key it read, so every row is read once. See the package documentation.
type Chunker struct {
	cfg        Config
	hooks      ChunkHooks
	connConfig *pgx.ConnConfig
	// primaryConfig, when the source is a standby, connects to its primary, where the markers
	// are written (Config.PrimaryConnString); nil otherwise.
	primaryConfig *pgx.ConnConfig
	log           *slog.Logger
	metrics       *metrics
	notices       *notices
	tag           string
	limiter       *rate.Limiter

	mu     sync.Mutex
	tables []*chunkTable
	wake   chan struct{}
	// slots bounds the chunks handed over and not yet durable (their rows are in memory), in
	// shares of a full chunk (slotShares each): a chunk takes a full one before its read and
	// keeps what its rows need (chunkShare), so many small tables' chunks can wait for the
	// stream at once.
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
	var pc *pgx.ConnConfig
	if cfg.Standby && cfg.PrimaryConnString != "" {
		if pc, err = parseConnConfig(cfg.PrimaryConnString, cfg.Timeouts); err != nil {
			return nil, fmt.Errorf("snapshot config: primary: %w", err)
		}
	}
	log := cfg.Logger.With(slog.String("stage", "snapshot"), slog.String("strategy", "chunked"))
	return &Chunker{
		cfg: cfg, hooks: hooks, connConfig: cc, primaryConfig: pc, tag: tag,
		log:     log,
		metrics: newMetrics(cfg.Registerer),
		notices: newNotices(log),
		limiter: cfg.Limiter,
		wake:    make(chan struct{}, 1),
		slots:   change.NewBudget(int64(2*cfg.Workers) * slotShares),
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

// slotShares is a full chunk's share of Chunker.slots. 2 × Workers full chunks fit in it, or up
// to 2 × Workers × slotShares small ones (a 10-row table's only chunk takes one share).
const slotShares = 64

// chunkShare is the share of Chunker.slots a chunk of read rows and bytes (encoded) keeps: its
// part of a full chunk (chunkRows rows, or twice chunkBytes encoded), rounded up, at least one.
func chunkShare(read, bytes, chunkRows int) int64 {
	frac := float64(bytes) / (2 * chunkBytes)
	if chunkRows > 0 {
		frac = max(frac, float64(read)/float64(chunkRows))
	}
	return min(max(int64(math.Ceil(frac*slotShares)), 1), slotShares)
}

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

	// streamed: the xids of the transactions the stream delivered before the copy started
	// (ChunkHooks.Streamed), taken by the first chunk (hasStreamed); see chunkWorker.read.
	streamed    []uint32
	hasStreamed bool

	// planMu guards the set-up above (table, key, encoder, chunkRows, streamed). Under Chunker.mu: the
	// cursor and everything after it.
	planMu sync.Mutex
	// cursor is the last key of the chunks read so far: the next chunk starts after it. While
	// reading, a chunk whose end is not known yet (an open chunk) holds it, and the table's
	// next chunk waits for that read to end.
	cursor    []string
	reading   bool
	exhausted bool // a chunk reached the table's last key
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
	seq int
	rg  change.KeyRange
	// open: the chunk's end is not known yet. Its read takes up to chunkRows keys after
	// rg.From, in key order, and sets rg.To to the last of them (nil when it read fewer: the
	// table's last chunk). A chunk read again after that reads its range, however many keys
	// it holds by then.
	open bool
	slot *change.Claim // its memory slot while it is not handed over
}

// claim cuts t's next chunk, open-ended after the cursor (under Chunker.mu).
func (t *chunkTable) claim() *plannedChunk {
	t.reading = true
	ch := &plannedChunk{seq: t.nextSeq, rg: change.KeyRange{From: t.cursor}, open: true}
	t.nextSeq++
	return ch
}

// ended records where open chunk ch of t ended: at the last key it read, read rows after its
// start (last nil: the table's end). The table's next chunk can be read from now on.
func (c *Chunker) ended(t *chunkTable, ch *plannedChunk, last []string, read int) {
	c.mu.Lock()
	ch.open, ch.rg.To = false, last
	t.cursor, t.reading, t.exhausted = last, false, last == nil
	if t.remaining != math.MaxInt64 {
		t.remaining = max(t.remaining-int64(read), 0)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run runs the chunker's workers until ctx ends.
func (c *Chunker) Run(ctx context.Context) error {
	defer c.notices.flush()
	var wg sync.WaitGroup
	for i := range c.cfg.Workers {
		wg.Go(func() { c.worker(ctx, i) })
	}
	wg.Go(func() { c.tick(ctx) })
	wg.Wait()
	return ctx.Err()
}
