package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/cdc/internal/burst"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/secret"
)

// Config configures the replication stage.
type Config struct {
	// ConnString is the PostgreSQL URL or DSN; the stage adds replication=database.
	ConnString  string
	Slot        string
	Publication string
	// SessionParams are set on the connection (pinned DateStyle, TimeZone, ...).
	SessionParams map[string]string
	// StatusInterval is how often standby status updates are sent; it is capped at half of the
	// server's wal_sender_timeout. Each asks the server for a keepalive, whose WAL end moves the
	// stream position on a quiet database. Default 1s.
	StatusInterval time.Duration
	// HoldMemory bounds each hold buffer in memory (bytes); SpillDir holds the rest, in a
	// folder named after the slot, whose spill files Run removes when it starts (those of a
	// process that died: only one process streams from a slot).
	HoldMemory int64
	SpillDir   string
	// MarkerTag names this process in the WAL markers of chunked copies (change.ChunkMarker);
	// markers of other tags are ignored.
	MarkerTag string
	// PieceBytes is the bound past which an open transaction's records are handed to the sink
	// as a piece, before its Commit message (see change.Piece). Default DefaultPieceBytes.
	PieceBytes int
	// PiecesInFlight × PieceBytes bounds the bytes of transactions (whole ones and pieces)
	// handed to the sink and not yet durable; the stream waits for the sink beyond it. Default
	// DefaultPiecesInFlight.
	PiecesInFlight int
	// Timeouts bound the connection attempt and every wait for the server's next message: a
	// stream that hears nothing (no change, no keepalive) for Timeouts.Receive is dropped and
	// reopened, like PostgreSQL's wal_receiver_timeout. Status updates ask the server for a
	// keepalive at least four times per Receive, so a live stream is never that quiet.
	Timeouts pgcat.Timeouts
	// StalePID is the walsender of the previous life's replication connection (0: none); the
	// stage ends it if it still holds the slot (see ReleaseStale).
	StalePID uint32
	// Encoders is how many goroutines encode row changes beside the stream goroutine, which
	// keeps decoding, routing and ordering them (encoders.go). 0 encodes in the stream
	// goroutine; with one P (GOMAXPROCS=1) the stage encodes there whatever the setting.
	Encoders int
	Codec    codec.Config
	Logger   *slog.Logger
}

// Defaults of Config's large-transaction bounds: at most 8 × 4 MiB of transactions' records are
// in memory between this stage and Kafka, twice what one Kafka transaction of the sink takes (16
// MiB), so the sink never waits for the stage.
const (
	// DefaultHoldMemory is Config.HoldMemory when zero: 64 MiB per hold buffer.
	DefaultHoldMemory     = 64 << 20
	DefaultPieceBytes     = 4 << 20
	DefaultPiecesInFlight = 8
)

// Keys is the catalog read the stage needs: the names of e's key columns when pgoutput cannot
// tell them (replica identity FULL marks every column).
type Keys interface {
	KeyColumns(ctx context.Context, e change.ExportID) ([]string, error)
}

// FactKind says what a Fact reports.
type FactKind uint8

// Facts the stage reports besides its units.
const (
	// FactUnknownRelation: a Relation message for a table that is not routed (Export).
	FactUnknownRelation FactKind = iota + 1
)

// Fact is something the stage saw that its owner may act on. Facts about an export's data
// (held changes released, a removal passed, a change that could not be encoded) travel as units,
// in stream order, so that their owner learns of them once they are durable.
type Fact struct {
	Kind   FactKind
	Export change.ExportID
}

// Stage is the replication stage. Create it with New, give it the exports to resume with
// Resume, then Run it; the control methods may be called from any goroutine while it runs.
type Stage struct {
	cfg  Config
	keys Keys
	log  *slog.Logger
	// hydrated logs "export hydrated" one by one while few tables hydrate at once.
	hydrated *burst.Logger
	// facts (Facts) never blocks the stream: a fact that finds it full is dropped (each says
	// "look at the publication", which the next one says again).
	facts chan Fact
	// confirmable is what the slot may confirm, as its owner last said (Confirm); 0: nothing.
	confirmable atomic.Uint64

	// Control functions run on the stream goroutine in the order they were queued: ctrlMu
	// guards the queue, ctrlSig (capacity 1) says it is not empty. The queue holds one entry
	// per lifecycle event of an export, so it stays small; queuing never blocks, which the
	// sink's callbacks need.
	ctrlMu  sync.Mutex
	ctrlQ   []func(*streamState)
	ctrlSig chan struct{}

	statusMu  sync.Mutex
	lastFlush change.LSN
	conn      *pgconn.PgConn

	state *streamState
	// streamed: a connection got as far as streaming; later ones resume at the stream position.
	streamed bool
	// timeline is the server's timeline on the first connection (IDENTIFY_SYSTEM).
	timeline int32

	// backendPID is the server process of the latest replication connection.
	backendPID atomic.Uint32
	// streaming: a connection is streaming from the slot now.
	streaming atomic.Bool

	// inFlight is the byte budget of transactions handed to the sink and not yet durable: the
	// sink returns each unit's claim.
	inFlight *change.Budget
}

// Facts returns the facts the stage reports (see Fact).
func (s *Stage) Facts() <-chan Fact { return s.facts }

// report sends f without blocking.
func (s *Stage) report(f Fact) {
	select {
	case s.facts <- f:
	default:
	}
}

// Confirm says the slot may be confirmed up to lsn (Kafka holds everything below it): the next
// standby status update sends it. It never moves the confirmed position backwards, and does
// not block.
func (s *Stage) Confirm(lsn change.LSN) {
	for {
		old := s.confirmable.Load()
		if uint64(lsn) <= old || s.confirmable.CompareAndSwap(old, uint64(lsn)) {
			return
		}
	}
}

// Streaming reports whether the stage is streaming from the slot now (false while it connects,
// reconnects or waits for the slot).
func (s *Stage) Streaming() bool { return s.streaming.Load() }

// BackendPID returns the PostgreSQL process id of the stage's latest replication connection (0
// before the first): the walsender that holds the slot while the stage streams.
func (s *Stage) BackendPID() uint32 { return s.backendPID.Load() }

// New returns a stage that reads key columns from keys; nothing is connected until Run.
func New(cfg Config, keys Keys) *Stage {
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = time.Second
	}
	if cfg.HoldMemory <= 0 {
		cfg.HoldMemory = DefaultHoldMemory
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PieceBytes <= 0 {
		cfg.PieceBytes = DefaultPieceBytes
	}
	if cfg.PiecesInFlight <= 0 {
		cfg.PiecesInFlight = DefaultPiecesInFlight
	}
	if cfg.SpillDir != "" && cfg.Slot != "" {
		cfg.SpillDir = filepath.Join(cfg.SpillDir, cfg.Slot)
	}
	log := cfg.Logger.With("stage", "replication")
	s := &Stage{
		cfg:      cfg,
		keys:     keys,
		log:      log,
		hydrated: burst.New(log, "export hydrated", "exports hydrated"),
		facts:    make(chan Fact, 16),
		ctrlSig:  make(chan struct{}, 1),
		inFlight: change.NewBudget(int64(cfg.PiecesInFlight) * int64(cfg.PieceBytes)),
	}
	s.state = newStreamState(s)
	s.backendPID.Store(cfg.StalePID)
	return s
}

// ResumePartial says that the first p.Changes changes of the transaction committing at
// p.Commit are durable already (published in pieces before a restart): they are skipped when
// the server sends that transaction again. Call it before Run.
func (s *Stage) ResumePartial(p change.Partial) {
	s.state.partial = p
}

// Resume registers exports that were hydrated before a restart: their changes flow directly,
// except transactions that committed below their own position (already published).
// Call it before Run.
func (s *Stage) Resume(positions map[change.ExportID]change.LSN) {
	for e, p := range positions {
		s.state.routes[e] = &route{mode: routeDirect, replayBelow: p}
	}
}

// Detect starts holding exports' changes, before their snapshot exists. It does not block: the
// returned channel is closed once the stream goroutine applied it, so a snapshot started
// afterwards sees every change it does not hold.
func (s *Stage) Detect(exports []change.ExportID) <-chan struct{} {
	done := make(chan struct{})
	s.post(func(st *streamState) { st.detect(exports); close(done) })
	return done
}

// SetConsistentPoint records the consistent point of exports' snapshot: held changes below it
// are dropped, later ones kept. It does not block: the outcome arrives on the returned channel
// once the stream goroutine applied it. An error means some export's held changes could not be
// kept whole: its snapshot must be restarted (it holds everything until then).
func (s *Stage) SetConsistentPoint(exports []change.ExportID, c change.LSN) <-chan error {
	done := make(chan error, 1)
	s.post(func(st *streamState) { done <- st.setConsistentPoint(exports, c) })
	return done
}

// CopyDone says e's copy is durable in Kafka: its hold buffer is released once the stream has
// passed its consistent point, followed by a KindHydrated unit. It does not block.
func (s *Stage) CopyDone(e change.ExportID) {
	s.post(func(st *streamState) { st.copyDone(e) })
}

// Remove says e left the publication when the server's WAL was at 'at': its changes are still
// routed until the stream passes 'at', then a KindRemoved unit is emitted. It does not block.
func (s *Stage) Remove(e change.ExportID, at change.LSN) {
	s.post(func(st *streamState) { st.remove(e, at) })
}

// Fail stops routing e (a permanent error of that export alone). It does not block.
func (s *Stage) Fail(e change.ExportID) {
	s.post(func(st *streamState) { st.fail(e) })
}

// Restart drops e's held changes and holds it again (its snapshot restarts). It does not block.
func (s *Stage) Restart(e change.ExportID) {
	s.post(func(st *streamState) { st.restartHold(e) })
}

// post queues a control function without blocking the caller (sink callbacks must not block).
// Functions run in the order they were queued.
func (s *Stage) post(fn func(*streamState)) {
	s.ctrlMu.Lock()
	s.ctrlQ = append(s.ctrlQ, fn)
	s.ctrlMu.Unlock()
	select {
	case s.ctrlSig <- struct{}{}:
	default:
	}
}

// takeControl returns the queued control functions and empties the queue.
func (s *Stage) takeControl() []func(*streamState) {
	s.ctrlMu.Lock()
	defer s.ctrlMu.Unlock()
	q := s.ctrlQ
	s.ctrlQ = nil
	return q
}

// Run streams from the slot until ctx ends or a permanent error occurs. Units go to out in
// stream order.
//
// A lost connection (a network cut, a server restart) reconnects this stage alone, after a
// capped exponential backoff and a log line per retry: the stream state (routes, hold buffers,
// the stream position S) survives, the incomplete transaction is discarded, and streaming
// resumes at S, skipping every transaction that commits below it (it was handled before the
// cut). Nothing is produced twice and the hydrating exports keep their copies. Permanent errors
// end Run: the slot missing or invalidated (ErrSlotLost), settings that do not parse, and a
// server on another timeline (ErrServerChanged: a promoted standby, which start-up checks).
func (s *Stage) Run(ctx context.Context, out chan<- *change.Unit) error {
	defer s.state.close()
	s.removeStaleSpill()
	backoff := retryMin
	for {
		started := time.Now()
		err := s.stream(ctx, out)
		if ctx.Err() != nil {
			// Orderly stop. The pipeline confirms the final position once the sink has
			// drained (pg_replication_slot_advance), after this connection is gone.
			return nil
		}
		// A slot still active is retried too: the walsender of a cut connection lingers until
		// the server notices.
		if err == nil || errors.Is(err, ErrSlotLost) || errors.Is(err, errConfig) || errors.Is(err, ErrServerChanged) {
			return err
		}
		if time.Since(started) > time.Minute || errors.Is(err, ErrSlotActive) {
			// A slot still held by the walsender of a cut connection is free in a moment.
			backoff = retryMin
		}
		if pe, ok := errors.AsType[*prepareError](err); ok {
			// Not the connection: the format could not prepare a table's encoder (with Avro,
			// the schema registry unreachable or refusing). The stream starts again from its
			// position all the same, so the transaction is encoded whole once it can be.
			s.log.Warn("cannot encode a table's changes yet (the schema registry?); streaming again from the last position", "err", pe.err, "stream_lsn", s.state.pos.String(), "retry_in", backoff.String())
		} else {
			s.log.Warn("replication connection lost; reconnecting", "err", err, "stream_lsn", s.state.pos.String(), "retry_in", backoff.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retryMax)
	}
}

// prepareError is a failure to prepare a table's encoder that is not the table's own (the schema
// registry unreachable or refusing the credentials): Run streams again from the stream position,
// as after a lost connection, and says what failed.
type prepareError struct{ err error }

func (e *prepareError) Error() string { return e.err.Error() }
func (e *prepareError) Unwrap() error { return e.err }

// removeStaleSpill removes hold-buffer spill files left in the slot's spill folder by a process
// that died; this one has none yet.
func (s *Stage) removeStaleSpill() {
	if s.cfg.Slot == "" {
		return
	}
	names, _ := filepath.Glob(filepath.Join(s.cfg.SpillDir, "hold-*.gob"))
	for _, name := range names {
		if err := os.Remove(name); err != nil {
			s.log.Warn("remove stale spill file", "file", name, "err", err)
			continue
		}
		s.log.Info("removed stale spill file", "file", name)
	}
}

// Bounds of the backoff between reconnections.
const (
	retryMin = 500 * time.Millisecond
	retryMax = 30 * time.Second
)

// errConfig marks a connection string that does not parse: retrying cannot help.
var errConfig = errors.New("invalid replication connection settings")

// ErrSlotActive means another process streams from the slot.
var ErrSlotActive = errors.New("replication slot is active for another process")

// stream runs one replication connection until it fails or ctx ends. After an earlier
// connection started streaming, it resumes at the stream position.
func (s *Stage) stream(ctx context.Context, out chan<- *change.Unit) error {
	cfg, err := pgcat.ReplicationConfig(s.cfg.ConnString, "tidemark-replication", s.cfg.Timeouts)
	if err != nil {
		return fmt.Errorf("replication connection config: %w: %w", errConfig, err)
	}
	for k, v := range s.cfg.SessionParams {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("replication connect: %w", secret.ScrubError(err, s.cfg.ConnString))
	}
	defer conn.Close(context.Background())
	s.statusMu.Lock()
	s.conn = conn
	s.statusMu.Unlock()
	// The previous connection's walsender, if its path died without closing.
	if err := ReleaseStale(ctx, conn, s.cfg.Slot, s.backendPID.Swap(conn.PID()), s.log); err != nil {
		return err
	}

	// A promoted standby (a new timeline) is checked at start-up against what Kafka holds
	// (pipeline's checkPromotion): a new life does that, not a reconnect.
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return fmt.Errorf("identify system: %w", err)
	}
	if s.timeline == 0 {
		s.timeline = sys.Timeline
	} else if sys.Timeline != s.timeline {
		return fmt.Errorf("the server is on timeline %d, no longer %d (a standby was promoted): %w", sys.Timeline, s.timeline, ErrServerChanged)
	}

	confirmed, interval, protoArgs, err := s.prepare(ctx, conn)
	if err != nil {
		return err
	}
	start := confirmed
	if s.streamed {
		// Everything up to S was handled: held, handed to the sink, or filtered.
		start = max(confirmed, s.state.pos)
		s.state.reconnected()
	} else {
		s.statusMu.Lock()
		s.lastFlush = max(s.lastFlush, confirmed)
		s.statusMu.Unlock()
		s.state.pos = confirmed
		s.streamed = true
	}
	s.log.Info("starting replication", "slot", s.cfg.Slot, "start_lsn", start.String(), "confirmed_lsn", confirmed.String(), "publication", s.cfg.Publication)
	err = pglogrepl.StartReplication(ctx, conn, s.cfg.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{PluginArgs: protoArgs})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" { // object_in_use: the slot is active
			return fmt.Errorf("start replication on slot %s: %s: %w", s.cfg.Slot, pgErr.Message, ErrSlotActive)
		}
		return fmt.Errorf("start replication on slot %s: %w", s.cfg.Slot, err)
	}

	s.streaming.Store(true)
	defer s.streaming.Store(false)
	msgs := make(chan []byte, 4096)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.receive(gctx, conn, msgs) })
	g.Go(func() error { return s.statusLoop(gctx, interval) })
	g.Go(func() error { return s.streamLoop(gctx, msgs, out) })
	return g.Wait()
}

// streamLoop runs the stream goroutine's loop, with encode workers or without.
func (s *Stage) streamLoop(ctx context.Context, msgs <-chan []byte, out chan<- *change.Unit) error {
	if n := s.encoders(); n > 0 {
		return s.state.loopAhead(ctx, msgs, out, n)
	}
	return s.state.loop(ctx, msgs, out)
}

// encoders is the number of encode workers the stream runs with: Config.Encoders, at most one
// per P besides the stream goroutine's.
func (s *Stage) encoders() int {
	return min(s.cfg.Encoders, runtime.GOMAXPROCS(0)-1)
}

// prepare reads the slot's confirmed position and the server settings that shape the stream.
func (s *Stage) prepare(ctx context.Context, conn *pgconn.PgConn) (change.LSN, time.Duration, []string, error) {
	res, err := conn.Exec(ctx, fmt.Sprintf(
		"SELECT confirmed_flush_lsn, coalesce(wal_status, ''), current_setting('server_version_num'), current_setting('wal_sender_timeout') FROM pg_replication_slots WHERE slot_name = '%s'",
		s.cfg.Slot)).ReadAll()
	if err != nil {
		return 0, 0, nil, fmt.Errorf("read slot %s: %w", s.cfg.Slot, err)
	}
	if len(res) == 0 || len(res[0].Rows) == 0 {
		// Dropped, or the server is a promoted standby that had no synchronised copy of it.
		return 0, 0, nil, fmt.Errorf("replication slot %q does not exist (dropped, or this server is a promoted standby without a synchronised failover slot: CDC_SLOT_FAILOVER, docs/production.md#failover): changes since it was last confirmed are lost; to start over, delete the watermark topic (or use a new CDC_TOPIC_PREFIX) so every table is copied again: %w", s.cfg.Slot, ErrSlotLost)
	}
	row := res[0].Rows[0]
	if string(row[1]) == "lost" {
		return 0, 0, nil, fmt.Errorf("replication slot %q was invalidated (wal_status=lost, max_slot_wal_keep_size exceeded): %w", s.cfg.Slot, ErrSlotLost)
	}
	start, err := change.ParseLSN(string(row[0]))
	if err != nil {
		return 0, 0, nil, fmt.Errorf("slot %s confirmed_flush_lsn: %w", s.cfg.Slot, err)
	}
	version, _ := strconv.Atoi(string(row[2]))
	interval := s.cfg.StatusInterval
	if t, err := parsePGDuration(string(row[3])); err == nil && t > 0 && t/2 < interval {
		interval = t / 2
	}
	if r := s.cfg.Timeouts.Receive; r > 0 && r/4 < interval {
		interval = r / 4
	}
	args := []string{"proto_version '1'", "publication_names " + PublicationNamesOption(s.cfg.Publication)}
	if version >= 140000 {
		// messages: the WAL markers of chunked copies.
		args = append(args, "streaming 'off'", "messages 'true'")
	}
	return start, interval, args, nil
}

// ErrServerChanged means the stream reconnected to another timeline: a standby was promoted.
// The stage stops, and a new life of the pipeline checks the promoted server at start-up.
var ErrServerChanged = errors.New("replication server changed")

// ErrSlotLost means changes may have been lost: the slot is missing or invalidated.
var ErrSlotLost = errors.New("replication slot lost")

func (s *Stage) statusLoop(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if err := s.sendStatus(ctx, true); err != nil {
				return err
			}
		}
	}
}

// sendStatus sends write = flush = apply = the confirmable LSN, never moving backwards.
func (s *Stage) sendStatus(ctx context.Context, reply bool) error {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	if lsn := change.LSN(s.confirmable.Load()); lsn > s.lastFlush {
		s.lastFlush = lsn
	}
	p := pglogrepl.LSN(s.lastFlush)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: p, WALFlushPosition: p, WALApplyPosition: p,
		ClientTime: time.Now(), ReplyRequested: reply,
	})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	return nil
}

// parsePGDuration parses a GUC time value as current_setting renders it ("60s", "1min", "0").
func parsePGDuration(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil {
		return 0, err
	}
	unit := map[string]time.Duration{"": time.Millisecond, "ms": time.Millisecond, "s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[s[i:]]
	if unit == 0 {
		return 0, fmt.Errorf("unknown unit in %q", s)
	}
	return time.Duration(n) * unit, nil
}

// PublicationNamesOption renders pub as the literal of pgoutput's publication_names option.
// pgoutput splits the option as a list of identifiers (SplitIdentifierString), lower-casing
// unquoted ones, so pub is double-quoted inside the literal, as PostgreSQL's own subscriber does:
// a publication named "People_Pub" is found under its own name.
func PublicationNamesOption(pub string) string {
	return pgcat.CommandLiteral(pgcat.Ident(pub))
}
