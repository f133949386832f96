package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/posture"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/kafkaconn"
	"github.com/tidemark/cdc/pkg/monitor"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/watermark"
)

// The status page's history: one sample per statusEvery, kept for statusWindow, per export.
const (
	statusEvery  = 5 * time.Second
	statusWindow = 15 * time.Minute
	// statusRing is the samples per export: with 1,000 exports the lag history holds 181,000
	// samples of 16 bytes (about 3 MB).
	statusRing = int(statusWindow/statusEvery) + 1
)

// Source is what the status board reads of the pipeline (a *pipeline.Pipeline; tests fake it).
type Source interface {
	Ready() (bool, []string, []pipeline.ExportState)
	Exports() []pipeline.ExportState
	Failover() *monitor.FailoverState
}

// StatusBoard samples, every statusEvery, what the status page shows beyond /exports: the
// server's WAL position, the slot's retained WAL, whether PostgreSQL and Kafka answer, and per
// export its lag (in bytes and seconds, for 15 minutes) and copy rate. It uses one ordinary
// PostgreSQL connection (application_name tidemark-status) and one Kafka client of its own.
type StatusBoard struct {
	cfg      pipeline.Config
	src      Source
	postures []posture.Posture
	started  time.Time
	log      *slog.Logger

	mu    sync.Mutex
	pg    connStatus
	kafka connStatus
	reg   connStatus // the schema registry (CDC_VALUE_FORMAT=avro); unused without one
	slot  slotStatus
	at    time.Time            // of the last sample
	wal   ring[walSample]      // the server's WAL position over the window
	lag   map[string]*lagRing  // by export
	rate  map[string]*copyRate // by export, while copying
}

// connStatus is one connection as the board last saw it.
type connStatus struct {
	State     string    `json:"state"` // "connected", "unreachable", "unknown"
	Error     string    `json:"error,omitempty"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
	// TLSInUse: PostgreSQL only, whether the board's own connection is encrypted (pg_stat_ssl).
	TLSInUse *bool  `json:"tls_in_use,omitempty"`
	Brokers  int    `json:"brokers,omitempty"` // Kafka only
	Version  string `json:"server_version,omitempty"`
}

// slotStatus is the replication slot as pg_replication_slots shows it.
type slotStatus struct {
	Name      string `json:"name"`
	Exists    bool   `json:"exists"`
	Active    bool   `json:"active"`
	WALStatus string `json:"wal_status,omitempty"`
	// RetainedBytes is the WAL the slot keeps: the server's position minus restart_lsn.
	RetainedBytes *int64 `json:"retained_bytes,omitempty"`
	// MaxKeepBytes is max_slot_wal_keep_size (null: unlimited, -1 on the server).
	MaxKeepBytes *int64 `json:"max_keep_bytes"`
	// SafeBytes is pg_replication_slots.safe_wal_size: WAL that can still be written before
	// the slot is in danger of invalidation (null when unlimited).
	SafeBytes *int64 `json:"safe_wal_bytes"`
}

type walSample struct {
	at  time.Time
	lsn change.LSN
}

// lagSample is one export's lag at one sample: 16 bytes.
type lagSample struct {
	at      uint32 // Unix seconds
	seconds float32
	bytes   int64
}

type lagRing = ring[lagSample]

// copyRate is an export's copy progress at the last samples of its current attempt: the rate
// is measured against the oldest of them (up to copyRateSamples, 30 s).
type copyRate struct {
	attempt int
	samples ring[copySample]
}

type copySample struct {
	at   time.Time
	rows int64
}

const copyRateSamples = 7

// perSecond is the copy's rate from the oldest sample to rows at now (false when the oldest
// sample is less than a second old).
func (c *copyRate) perSecond(rows int64, now time.Time) (float64, bool) {
	first, ok := c.samples.first()
	if el := now.Sub(first.at).Seconds(); ok && el >= 1 {
		return float64(rows-first.rows) / el, true
	}
	return 0, false
}

// NewStatusBoard returns a board of the pipeline src, configured by cfg, that shows the
// connections' postures; it samples once Run starts.
func NewStatusBoard(cfg pipeline.Config, postures []posture.Posture, src Source, log *slog.Logger) *StatusBoard {
	return &StatusBoard{cfg: cfg, src: src, postures: postures, started: time.Now(), log: log.With("stage", "status"),
		pg: connStatus{State: "unknown"}, kafka: connStatus{State: "unknown"}, reg: connStatus{State: "unknown"}, slot: slotStatus{Name: cfg.Slot},
		wal: newRing[walSample](statusRing), lag: map[string]*lagRing{}, rate: map[string]*copyRate{}}
}

// run samples until ctx ends.
func (b *StatusBoard) Run(ctx context.Context) {
	var pg *pgx.Conn
	var kc *kgo.Client
	defer func() {
		if pg != nil {
			pg.Close(context.Background())
		}
		if kc != nil {
			kc.Close()
		}
	}()
	t := time.NewTicker(statusEvery)
	defer t.Stop()
	for {
		pg = b.samplePostgres(ctx, pg)
		kc = b.sampleKafka(ctx, kc)
		b.sampleRegistry(ctx)
		b.sampleExports(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// samplePostgres reads the WAL position and the slot on conn (connecting first when conn is
// nil) and returns the connection to use next time (nil after an error).
func (b *StatusBoard) samplePostgres(ctx context.Context, conn *pgx.Conn) *pgx.Conn {
	ctx, cancel := context.WithTimeout(ctx, statusEvery)
	defer cancel()
	st := connStatus{CheckedAt: time.Now()}
	fail := func(err error) *pgx.Conn {
		if conn != nil {
			conn.Close(context.Background())
		}
		st.State, st.Error = "unreachable", secret.ScrubError(err, b.cfg.PGURL).Error()
		b.mu.Lock()
		b.pg = st
		b.mu.Unlock()
		return nil
	}
	if conn == nil {
		cfg, err := pgx.ParseConfig(b.cfg.PGURL)
		if err != nil {
			return fail(fmt.Errorf("parse CDC_PG_URL: %w", err))
		}
		if b.cfg.ConnectTimeout > 0 && cfg.ConnectTimeout == 0 {
			cfg.ConnectTimeout = b.cfg.ConnectTimeout
		}
		cfg.RuntimeParams["application_name"] = "tidemark-status"
		if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return fail(err)
		}
	}
	var wal string
	var tlsInUse bool
	var maxKeepMB int64
	var restart, walStatus *string
	var active *bool
	var retained, safe *int64
	err := conn.QueryRow(ctx, `
		SELECT (`+pgcat.WALPositionSQL+`)::text, current_setting('server_version'),
			coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false),
			(SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'),
			s.restart_lsn::text, s.wal_status, s.active,
			pg_wal_lsn_diff(`+pgcat.WALPositionSQL+`, s.restart_lsn)::bigint, s.safe_wal_size
		FROM (SELECT 1) one LEFT JOIN pg_replication_slots s ON s.slot_name = $1`, b.cfg.Slot).
		Scan(&wal, &st.Version, &tlsInUse, &maxKeepMB, &restart, &walStatus, &active, &retained, &safe)
	if err != nil {
		return fail(fmt.Errorf("read the WAL position and slot %s: %w", b.cfg.Slot, err))
	}
	lsn, err := change.ParseLSN(wal)
	if err != nil {
		return fail(err)
	}
	st.State, st.TLSInUse = "connected", &tlsInUse
	slot := slotStatus{Name: b.cfg.Slot, Exists: restart != nil || active != nil, RetainedBytes: retained, SafeBytes: safe}
	slot.Active = active != nil && *active
	if walStatus != nil {
		slot.WALStatus = *walStatus
	}
	if maxKeepMB >= 0 {
		v := maxKeepMB << 20
		slot.MaxKeepBytes = &v
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pg, b.slot = st, slot
	b.wal.push(walSample{at: st.CheckedAt, lsn: lsn})
	return conn
}

// sampleKafka asks the brokers for their metadata on kc (a new client when nil) and returns the
// client to use next time.
func (b *StatusBoard) sampleKafka(ctx context.Context, kc *kgo.Client) *kgo.Client {
	ctx, cancel := context.WithTimeout(ctx, statusEvery)
	defer cancel()
	st := connStatus{CheckedAt: time.Now()}
	defer func() {
		b.mu.Lock()
		b.kafka = st
		b.mu.Unlock()
	}()
	if kc == nil {
		var err error
		kc, err = kafkaconn.NewClient(kafkaconn.Settings{Brokers: b.cfg.Sink.Brokers, Security: b.cfg.Sink.Security,
			ClientID: "tidemark-status", DialTimeout: cmp.Or(b.cfg.ConnectTimeout, 5*time.Second)})
		if err != nil {
			st.State, st.Error = "unreachable", err.Error()
			return nil
		}
	}
	meta, err := kadm.NewClient(kc).BrokerMetadata(ctx)
	if err != nil {
		st.State, st.Error = "unreachable", err.Error()
		return kc
	}
	st.State, st.Brokers = "connected", len(meta.Brokers)
	return kc
}

// sampleRegistry asks the schema registry, when there is one, for its global compatibility
// level: whether it answers, whatever cdc has to register.
func (b *StatusBoard) sampleRegistry(ctx context.Context) {
	if b.cfg.Registry == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statusEvery)
	defer cancel()
	st := connStatus{State: "connected", CheckedAt: time.Now()}
	if err := b.cfg.Registry.Ping(ctx); err != nil {
		st.State, st.Error = "unreachable", err.Error()
	}
	b.mu.Lock()
	b.reg = st
	b.mu.Unlock()
}

// sampleExports records each export's lag and copy rate at now, against the last WAL sample,
// and forgets exports the pipeline no longer has.
func (b *StatusBoard) sampleExports(now time.Time) {
	exports := b.src.Exports()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.at = now
	seen := make(map[string]bool, len(exports))
	for _, s := range exports {
		name := s.Export.String()
		seen[name] = true
		if bytes, secs, ok := b.lagOf(s, now); ok {
			r := b.lag[name]
			if r == nil {
				nr := newRing[lagSample](statusRing)
				r = &nr
				b.lag[name] = r
			}
			r.push(lagSample{at: uint32(now.Unix()), seconds: float32(secs), bytes: bytes})
		}
		if s.State != watermark.StateHydrating || s.Estimated == 0 && s.Rows == 0 {
			delete(b.rate, name)
			continue
		}
		c := b.rate[name]
		if c == nil || c.attempt != s.Attempt {
			c = &copyRate{attempt: s.Attempt, samples: newRing[copySample](copyRateSamples)}
			b.rate[name] = c
		}
		c.samples.push(copySample{at: now, rows: s.Rows})
	}
	for name := range b.lag {
		if !seen[name] {
			delete(b.lag, name)
		}
	}
	for name := range b.rate {
		if !seen[name] {
			delete(b.rate, name)
		}
	}
}

// lagOf is how far s's watermark is behind the server's WAL: in bytes, against the last WAL
// sample, and in seconds, since the WAL passed the watermark (at the first sample past it; at
// least the window's length when that is older). Exports without a watermark have no lag.
// Call with b.mu held.
func (b *StatusBoard) lagOf(s pipeline.ExportState, now time.Time) (bytes int64, seconds float64, ok bool) {
	last, have := b.wal.last()
	if s.Watermark == nil || !have || s.State == watermark.StateRemoved {
		return 0, 0, false
	}
	w := *s.Watermark
	if w >= last.lsn {
		return 0, 0, true
	}
	bytes = int64(last.lsn - w)
	passed := last.at
	for ws := range b.wal.all() {
		if ws.lsn > w {
			passed = ws.at
			break
		}
	}
	return bytes, max(0, now.Sub(passed).Seconds()), true
}

// ring keeps the last size values pushed. Its buffer grows to size as values come (at 10,000
// tables, rings made full at once held 29 MB from the start, when the copies need the memory).
type ring[T any] struct {
	buf  []T // grows to size, then wraps
	size int
	next int // where the next value goes once buf is full
}

func newRing[T any](size int) ring[T] { return ring[T]{size: max(size, 1)} }

func (r *ring[T]) push(v T) {
	if len(r.buf) < r.size {
		if len(r.buf) == cap(r.buf) {
			buf := make([]T, len(r.buf), min(r.size, max(8, 2*cap(r.buf))))
			copy(buf, r.buf)
			r.buf = buf
		}
		r.buf = append(r.buf, v)
		r.next = len(r.buf) % r.size
		return
	}
	r.buf[r.next] = v
	r.next = (r.next + 1) % r.size
}

// all yields the values oldest first.
func (r *ring[T]) all() func(yield func(T) bool) {
	return func(yield func(T) bool) {
		n := len(r.buf)
		for i := range n {
			if !yield(r.buf[(r.next+i)%n]) {
				return
			}
		}
	}
}

func (r *ring[T]) first() (T, bool) {
	if len(r.buf) == 0 {
		var zero T
		return zero, false
	}
	return r.buf[r.next%len(r.buf)], true
}

func (r *ring[T]) last() (T, bool) {
	if len(r.buf) == 0 {
		var zero T
		return zero, false
	}
	return r.buf[(r.next-1+len(r.buf))%len(r.buf)], true
}
