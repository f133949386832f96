package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// Request asks for one snapshot of Exports, taken together at one consistent point.
type Request struct {
	Exports []change.ExportID
}

// TableInfo describes one table of a request, read under its snapshot.
type TableInfo struct {
	Table         *change.Table
	EstimatedRows int64
	Blocks        int64
}

// Hooks is implemented by the pipeline. The stage serialises its calls.
type Hooks interface {
	// Begin is called once per request after the temporary slot exists (consistent point c) and
	// the tables' schemas were read under the snapshot, before any row is read. It returns the
	// attempt number of each export (the pipeline's tracker assigns them).
	Begin(ctx context.Context, c change.LSN, tables []TableInfo) (attempts map[change.ExportID]int, err error)
	// Restart reports that e's copy was abandoned because the table was rewritten after the
	// consistent point; the pipeline will request e again.
	Restart(e change.ExportID, reason string)
	// Failed reports a permanent error for e alone (dropped table, missing privilege on it); the
	// other exports of the request go on.
	Failed(e change.ExportID, err error)
}

// Stage is the snapshot stage. Create it with New and run it with Run.
type Stage struct {
	cfg        Config
	hooks      Hooks
	connConfig *pgx.ConnConfig
	log        *slog.Logger
	metrics    *metrics
	notices    *notices
}

// New checks cfg, fills its defaults and returns a stage that reports to hooks.
func New(cfg Config, hooks Hooks) (*Stage, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("snapshot config: %w", err)
	}
	if hooks == nil {
		return nil, errors.New("snapshot config: hooks are nil")
	}
	cc, err := parseConnConfig(cfg.ConnString, cfg.Timeouts)
	if err != nil {
		return nil, fmt.Errorf("snapshot config: %w", err)
	}
	log := cfg.Logger.With(slog.String("stage", "snapshot"))
	return &Stage{
		cfg:        cfg,
		hooks:      hooks,
		connConfig: cc,
		log:        log,
		metrics:    newMetrics(cfg.Registerer),
		notices:    newNotices(log),
	}, nil
}

// Run serves requests one at a time until reqs is closed (it returns nil) or ctx ends (it returns
// ctx's error). For each request it emits, on out, KindSnapshot units and, after the last unit of
// an export has been sent, one KindSnapshotDone unit for it. Sends block, respecting ctx. Run
// returns only when all of its goroutines have ended.
//
// Errors confined to one export go to Hooks.Failed or Hooks.Restart. A request that fails as a
// whole (a lost connection, a server restart, Kafka unavailable while the topics are created)
// does not end Run: after a capped exponential backoff, every export of it whose copy had not been
// sent whole is reported to Hooks.Restart, which asks for it again with a new consistent point.
// The other exports, and the other stages, go on.
func (s *Stage) Run(ctx context.Context, reqs <-chan Request, out chan<- *change.Unit) error {
	defer s.notices.flush()
	backoff := retryMin
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case req, ok := <-reqs:
			if !ok {
				return nil
			}
			unfinished, err := s.serve(ctx, req, out)
			if err == nil {
				backoff = retryMin
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("snapshot interrupted; copying its tables again", slog.Any("error", err),
				slog.Int("tables", len(unfinished)), slog.Duration("retry_in", backoff))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, retryMax)
			for _, e := range unfinished {
				s.hooks.Restart(e, "snapshot interrupted: "+err.Error())
			}
		}
	}
}

// Bounds of the backoff between attempts of a failed request.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// exportState is one export of a running request.
type exportState struct {
	id        change.ExportID
	table     *change.Table
	stats     tableStats
	enc       *codec.Encoder
	attempt   int
	remaining atomic.Int64 // ranges not yet copied
	seq       atomic.Int64 // row numbers (codec.Source.Seq) across workers
	stopped   atomic.Bool  // restarted or failed in this request
	finished  atomic.Bool  // its KindSnapshotDone unit was sent
	progress  *progress
}

// request is the state workers share while serving one Request.
type request struct {
	s       *Stage
	c       change.LSN
	start   time.Time
	out     chan<- *change.Unit
	exports map[change.ExportID]*exportState
	queue   chan Task
	hookMu  sync.Mutex
}

func (r *request) source(e *exportState) codec.Source {
	return codec.Source{LSN: r.c - 1, Seq: e.seq.Add(1), Snapshot: true, Attempt: e.attempt, Time: r.start}
}

func (r *request) send(ctx context.Context, u *change.Unit) error {
	select {
	case r.out <- u:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// done sends e's KindSnapshotDone unit. The caller sent e's last batch before.
func (r *request) done(ctx context.Context, e *exportState) error {
	u := &change.Unit{Kind: change.KindSnapshotDone, Export: e.id, Attempt: e.attempt, Commit: r.c - 1, Time: r.start}
	if err := r.send(ctx, u); err != nil {
		return err
	}
	e.finished.Store(true)
	e.progress.finish(time.Now(), "")
	return nil
}

// restart stops e in this request and tells the pipeline to ask again.
func (r *request) restart(e *exportState, reason string) {
	if !e.stopped.CompareAndSwap(false, true) {
		return
	}
	e.progress.finish(time.Now(), reason)
	r.hookMu.Lock()
	defer r.hookMu.Unlock()
	r.s.hooks.Restart(e.id, reason)
}

// fail stops e in this request for good.
func (r *request) fail(e *exportState, err error) {
	if !e.stopped.CompareAndSwap(false, true) {
		return
	}
	e.progress.finish(time.Now(), err.Error())
	r.hookMu.Lock()
	defer r.hookMu.Unlock()
	r.s.hooks.Failed(e.id, err)
}

// serve runs one request to its end. When it fails, unfinished are the exports whose copy was
// not sent whole and that were not stopped (restarted or failed) already.
func (s *Stage) serve(ctx context.Context, req Request, out chan<- *change.Unit) (unfinished []change.ExportID, err error) {
	exports := dedupe(req.Exports)
	if len(exports) == 0 {
		return nil, nil
	}
	var states map[change.ExportID]*exportState
	defer func() {
		if err == nil {
			return
		}
		if states == nil {
			unfinished = exports
			return
		}
		for _, e := range exports {
			if st, ok := states[e]; ok && !st.stopped.Load() && !st.finished.Load() {
				unfinished = append(unfinished, e)
			}
		}
	}()
	x, err := s.openExporter(ctx)
	if err != nil {
		var waitErr *SlotWaitError
		if ctx.Err() == nil && (errors.Is(err, ErrNoReplicationCapacity) || errors.As(err, &waitErr)) {
			s.log.Warn("snapshot request cannot start", slog.Any("error", err), slog.Int("tables", len(exports)))
			for _, e := range exports {
				s.hooks.Failed(e, err)
			}
			return nil, nil
		}
		return nil, err
	}
	defer x.abort()
	start := time.Now()
	if s.cfg.Codec.Now != nil {
		start = s.cfg.Codec.Now()
	}
	log := s.log.With(slog.String("slot", x.slot), slog.String("consistent_point", x.c.String()))

	var conns []*pgx.Conn
	defer func() {
		for _, c := range conns {
			closeQuietly(c)
		}
	}()
	first, err := s.openWorker(ctx, x.snapshotID)
	if err != nil {
		return nil, err
	}
	conns = append(conns, first)

	// pg_relation_size locks each table until the transaction ends; the savepoint's rollback
	// releases those locks (keeping the snapshot), so DDL is not blocked for the whole copy.
	if err := execSimple(ctx, first, "SAVEPOINT tidemark_prepare"); err != nil {
		return nil, fmt.Errorf("read tables: %w", err)
	}
	var infos []TableInfo
	states, infos, err = s.prepare(ctx, first, exports)
	if err != nil {
		return nil, err
	}
	if err := execSimple(ctx, first, "ROLLBACK TO SAVEPOINT tidemark_prepare; RELEASE SAVEPOINT tidemark_prepare"); err != nil {
		return nil, fmt.Errorf("read tables: %w", err)
	}
	rangeBlocks := int64(s.cfg.RangeBlocks)
	if !tidRangeScans(first.PgConn().ParameterStatus("server_version")) {
		rangeBlocks = math.MaxInt64 // a ctid range would be a filter over a full scan: one range per table
	}
	queue := BuildQueue(infos, rangeBlocks)
	for len(conns) < min(s.cfg.Workers, len(queue)) {
		c, err := s.openWorker(ctx, x.snapshotID)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	// Every worker holds the snapshot now: drop the temporary slot, so it pins no WAL.
	if err := x.close(ctx); err != nil {
		return nil, err
	}
	if len(states) == 0 {
		return nil, nil
	}

	attempts, err := s.hooks.Begin(ctx, x.c, infos)
	if err != nil {
		return nil, fmt.Errorf("begin snapshot at %s: %w", x.c, err)
	}
	r := &request{s: s, c: x.c, start: start, out: out, exports: states, queue: make(chan Task, len(queue))}
	for _, info := range infos {
		e := states[info.Table.Export]
		a, ok := attempts[e.id]
		if !ok {
			return nil, fmt.Errorf("begin snapshot at %s: no attempt number for %s", x.c, e.id)
		}
		e.attempt = a
		e.progress = newProgress(e.id.String(), info.EstimatedRows, s.metrics, s.notices,
			log.With(slog.Int("attempt", a)), s.cfg.ProgressInterval, time.Now())
	}
	for _, t := range queue {
		states[t.Export].remaining.Add(1)
		r.queue <- t
	}
	close(r.queue)
	log.Info("snapshot copy started", slog.Int("tables", len(infos)), slog.Int("ranges", len(queue)), slog.Int("workers", len(conns)))

	g, gctx := errgroup.WithContext(ctx)
	for _, c := range conns {
		w := &worker{s: s, r: r, conn: c, encs: map[*exportState]*codec.Encoder{}}
		g.Go(func() error { return w.run(gctx) })
	}
	stopTicks := make(chan struct{})
	var ticks sync.WaitGroup
	ticks.Go(func() { r.tick(gctx, stopTicks) })
	err = g.Wait()
	close(stopTicks)
	ticks.Wait()
	if err != nil {
		return nil, fmt.Errorf("snapshot at %s: %w", x.c, err)
	}
	log.Info("snapshot copy finished", slog.Duration("took", time.Since(start).Round(time.Millisecond)))
	return nil, nil
}

// prepare reads schema, size and estimate of every export under the snapshot, failing the exports
// that are missing or unreadable.
func (s *Stage) prepare(ctx context.Context, conn *pgx.Conn, exports []change.ExportID) (map[change.ExportID]*exportState, []TableInfo, error) {
	states := make(map[change.ExportID]*exportState, len(exports))
	var infos []TableInfo
	for _, id := range exports {
		t, err := pgcat.LoadTable(ctx, conn, s.cfg.Publication, id)
		if errors.Is(err, pgcat.ErrTableNotFound) || errors.Is(err, pgcat.ErrUnsupportedTable) {
			s.hooks.Failed(id, err)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		st, err := loadStats(ctx, conn, t.OID)
		if err != nil {
			return nil, nil, fmt.Errorf("read size of %s: %w", id, err)
		}
		if !st.canSelect {
			s.hooks.Failed(id, fmt.Errorf("snapshot %s: permission denied (grant SELECT on it to the replication user)", id))
			continue
		}
		if err := s.cfg.Codec.Prepare(ctx, t); errors.Is(err, codec.ErrTypeNotFound) || errors.Is(err, codec.ErrSchemaRefused) {
			s.hooks.Failed(id, fmt.Errorf("snapshot %s: %w", id, err))
			continue
		} else if err != nil {
			return nil, nil, fmt.Errorf("snapshot %s: %w", id, err)
		}
		enc, err := codec.NewEncoder(s.cfg.Codec, t)
		if err != nil {
			s.hooks.Failed(id, fmt.Errorf("snapshot %s: %w", id, err))
			continue
		}
		if st.relkind != "r" {
			st.blocks = 0 // a partitioned table is read as a whole
		}
		states[id] = &exportState{id: id, table: t, stats: st, enc: enc}
		infos = append(infos, TableInfo{Table: t, EstimatedRows: st.estimated, Blocks: st.blocks})
	}
	return states, infos, nil
}

// tick logs progress of slow tables until stop is closed.
func (r *request) tick(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(min(r.s.cfg.ProgressInterval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, e := range r.exports {
				e.progress.tick(now)
			}
		}
	}
}

// tidRangeScans says whether a server of this version (the server_version parameter, e.g. "15.4"
// or "14beta1") scans a ctid range without reading the whole table: PostgreSQL 14 and later.
func tidRangeScans(version string) bool { return pgcat.ServerMajor(version) >= 14 }

func dedupe(ids []change.ExportID) []change.ExportID {
	seen := make(map[change.ExportID]bool, len(ids))
	var outIDs []change.ExportID
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			outIDs = append(outIDs, id)
		}
	}
	return outIDs
}
