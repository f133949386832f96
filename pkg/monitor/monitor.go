package monitor

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/watermark"
)

// monitorInterval is how often the monitor samples the server's WAL position and the slot.
const monitorInterval = 5 * time.Second

// walHistory bounds the WAL positions kept for lag in seconds: an hour at monitorInterval.
const walHistory = 720

// A sample older than monitorStale is not reported: the metrics disappear rather than freeze
// while PostgreSQL cannot be reached.
const monitorStale = 3 * monitorInterval

// The monitor's metrics, computed at each scrape from the exports' states and the last sample.
var (
	readyDesc = prometheus.NewDesc("tidemark_ready",
		"1 when the pipeline streams and no live table failed (as /readyz answers 200), else 0.", nil, nil)
	exportStateDesc = prometheus.NewDesc("tidemark_export_state",
		"Always 1, one series per export: its watermark state (hydrating, hydrated, removed, failed) and lifecycle phase in labels.",
		[]string{"export", "state", "phase"}, nil)
	lagBytesDesc = prometheus.NewDesc("tidemark_export_watermark_lag_bytes",
		"WAL bytes between the server's current WAL position and a hydrated export's watermark.",
		[]string{"export"}, nil)
	lagSecondsDesc = prometheus.NewDesc("tidemark_export_watermark_lag_seconds",
		"Seconds since the server's WAL first passed a hydrated export's watermark (0 when the watermark is at the WAL's end; resolution 5 s, at most an hour back).",
		[]string{"export"}, nil)
	slotRetainedDesc = prometheus.NewDesc("tidemark_slot_wal_retained_bytes",
		"WAL bytes the replication slot retains: the server's current WAL position minus the slot's restart_lsn.",
		[]string{"slot"}, nil)
	slotKeepDesc = prometheus.NewDesc("tidemark_slot_wal_keep_size_bytes",
		"The server's max_slot_wal_keep_size in bytes (absent when unlimited, -1).",
		[]string{"slot"}, nil)
	slotSafeDesc = prometheus.NewDesc("tidemark_slot_wal_safe_size_bytes",
		"WAL bytes that can still be written before the slot is in danger of being invalidated (pg_replication_slots.safe_wal_size; absent when unlimited).",
		[]string{"slot"}, nil)
	slotStatusDesc = prometheus.NewDesc("tidemark_slot_wal_status",
		"Always 1: the slot's pg_replication_slots.wal_status (reserved, extended, unreserved, lost) in a label.",
		[]string{"slot", "status"}, nil)
)

// walSample is the server's WAL position at a moment.
type walSample struct {
	at  time.Time
	lsn change.LSN
}

// slotSample is what the server said about the slot at one sample.
type slotSample struct {
	at       time.Time
	exists   bool
	restart  change.LSN
	retained bool // restart is known (an invalidated slot has none)
	status   string
	keep     int64  // max_slot_wal_keep_size in bytes; -1: unlimited
	safe     *int64 // safe_wal_size
}

// Config is what the monitor samples: the server of URL, with timeouts, and the slot.
type Config struct {
	PGURL    string
	Slot     string
	Timeouts pgcat.Timeouts
	// SlotFailover: the slot is a failover slot, whose copy on a standby among PGURL's hosts
	// is watched (failover.go).
	SlotFailover bool
	Logger       *slog.Logger
}

// Export is what the monitor reports of one export beside the samples.
type Export struct {
	Name  string
	State watermark.State
	Phase string
	// Watermark is the export's watermark, nil before its first.
	Watermark *change.LSN
}

// Source is what the monitor reads of the pipeline at scrape time.
type Source interface {
	// Ready is what /readyz answers.
	Ready() bool
	Exports() []Export
}

// Monitor samples, on a connection of its own, the server's WAL position and the slot's WAL
// retention, and reports them at scrape time beside the exports' states, readiness and
// watermark lag. It runs for the whole of the pipeline's run, across its restarts: a slot
// retaining WAL matters most while the pipeline cannot run. It is a prometheus.Collector.
type Monitor struct {
	src     Source
	slot    string
	connect func(context.Context) (*pgcat.Conn, error)
	log     *slog.Logger
	now     func() time.Time

	// failover samples the standby's copy of a failover slot (nil: not watched).
	failover *failoverWatch

	mu   sync.Mutex
	wal  []walSample // WAL positions, strictly increasing, oldest first
	last slotSample  // the latest sample (zero at: none yet)
}

// New returns a monitor of cfg's server and slot, reporting src's exports; it samples once
// Start is called.
func New(cfg Config, src Source) *Monitor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Monitor{
		src:      src,
		slot:     cfg.Slot,
		connect:  func(ctx context.Context) (*pgcat.Conn, error) { return pgcat.Connect(ctx, cfg.PGURL, cfg.Timeouts) },
		log:      cfg.Logger.With("stage", "monitor"),
		now:      time.Now,
		failover: newFailoverWatch(cfg),
	}
}

// Failover returns the standby's copy of the failover slot as last sampled: nil without
// SlotFailover, with one host in the URL, or before the first sample.
func (m *Monitor) Failover() *FailoverState { return m.failover.current() }

// Start samples every monitorInterval until stop is called or ctx ends; stop returns when
// sampling ended.
func (m *Monitor) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if m.failover == nil {
			m.run(ctx)
			return
		}
		var wg sync.WaitGroup
		wg.Go(func() { m.failover.run(ctx) })
		m.run(ctx)
		wg.Wait()
	}()
	return func() {
		cancel()
		<-done
	}
}

func (m *Monitor) run(ctx context.Context) {
	t := time.NewTicker(monitorInterval)
	defer t.Stop()
	var conn *pgcat.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	failing := false
	for {
		err := m.sample(ctx, &conn)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			// Once per streak: the pipeline's own stages log the server's troubles.
			m.log.Warn("cannot sample the slot's WAL retention; its metrics are absent until it works again", "slot", m.slot, "err", err)
		case err == nil && failing:
			m.log.Info("sampling the slot's WAL retention again", "slot", m.slot)
		}
		failing = err != nil
		if err != nil && conn != nil {
			conn.Close(context.Background())
			conn = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample reads the server's WAL position and the slot, connecting first if *conn is nil.
func (m *Monitor) sample(ctx context.Context, conn **pgcat.Conn) error {
	if *conn == nil {
		c, err := m.connect(ctx)
		if err != nil {
			return err
		}
		*conn = c
	}
	qctx, cancel := context.WithTimeout(ctx, monitorInterval)
	defer cancel()
	var (
		current         string
		restart, status *string
		s               = slotSample{}
	)
	err := (*conn).QueryRow(qctx, `SELECT (`+pgcat.WALPositionSQL+`)::text,
			pg_catalog.pg_size_bytes(pg_catalog.current_setting('max_slot_wal_keep_size')),
			s.slot_name IS NOT NULL, s.restart_lsn::text, s.wal_status, s.safe_wal_size
		FROM (VALUES (1)) AS one
		LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = $1`, m.slot).
		Scan(&current, &s.keep, &s.exists, &restart, &status, &s.safe)
	if err != nil {
		return fmt.Errorf("read slot %s: %w", m.slot, err)
	}
	lsn, err := change.ParseLSN(current)
	if err != nil {
		return fmt.Errorf("read WAL position: %w", err)
	}
	if restart != nil {
		if s.restart, err = change.ParseLSN(*restart); err != nil {
			return fmt.Errorf("read slot %s: restart_lsn: %w", m.slot, err)
		}
		s.retained = true
	}
	if status != nil {
		s.status = *status
	}
	s.at = m.now()
	m.record(walSample{at: s.at, lsn: lsn}, s)
	return nil
}

// record keeps a sample: the WAL position when it moved, and the slot's state.
func (m *Monitor) record(w walSample, s slotSample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.wal); n == 0 || w.lsn > m.wal[n-1].lsn {
		m.wal = append(m.wal, w)
		if len(m.wal) > walHistory {
			m.wal = append(m.wal[:0:0], m.wal[len(m.wal)-walHistory:]...)
		}
	}
	m.last = s
}

// lagSeconds is how long before now the server's WAL first passed w, as far as the samples
// tell: 0 when w is at or past the latest sample; at least the age of the oldest sample when w
// is older than all of them.
func lagSeconds(wal []walSample, w change.LSN, now time.Time) float64 {
	i := sort.Search(len(wal), func(i int) bool { return wal[i].lsn > w })
	if i == len(wal) {
		return 0
	}
	return max(0, now.Sub(wal[i].at).Seconds())
}

func (m *Monitor) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{readyDesc, exportStateDesc, lagBytesDesc, lagSecondsDesc,
		slotRetainedDesc, slotKeepDesc, slotSafeDesc, slotStatusDesc, failoverReadyDesc, failoverUnreadyDesc} {
		ch <- d
	}
}

func (m *Monitor) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, boolValue(m.src.Ready()))
	exports := m.src.Exports()

	now := m.now()
	if m.failover != nil {
		m.failover.collect(ch, now)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fresh := !m.last.at.IsZero() && now.Sub(m.last.at) < monitorStale
	var end change.LSN
	if fresh {
		end = m.wal[len(m.wal)-1].lsn
		m.collectSlot(ch, end)
	}
	for _, s := range exports {
		ch <- prometheus.MustNewConstMetric(exportStateDesc, prometheus.GaugeValue, 1, s.Name, string(s.State), s.Phase)
		if !fresh || s.State != watermark.StateHydrated || s.Watermark == nil {
			continue
		}
		w := *s.Watermark
		var behind float64
		if end > w {
			behind = float64(end - w)
		}
		ch <- prometheus.MustNewConstMetric(lagBytesDesc, prometheus.GaugeValue, behind, s.Name)
		ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, lagSeconds(m.wal, w, now), s.Name)
	}
}

// collectSlot reports the last slot sample, end being the WAL position sampled with it. Call
// with m.mu held.
func (m *Monitor) collectSlot(ch chan<- prometheus.Metric, end change.LSN) {
	s := m.last
	if !s.exists {
		return
	}
	if s.keep >= 0 {
		ch <- prometheus.MustNewConstMetric(slotKeepDesc, prometheus.GaugeValue, float64(s.keep), m.slot)
	}
	if s.safe != nil {
		ch <- prometheus.MustNewConstMetric(slotSafeDesc, prometheus.GaugeValue, float64(*s.safe), m.slot)
	}
	if s.status != "" {
		ch <- prometheus.MustNewConstMetric(slotStatusDesc, prometheus.GaugeValue, 1, m.slot, s.status)
	}
	if s.retained {
		var retained float64
		if end > s.restart {
			retained = float64(end - s.restart)
		}
		ch <- prometheus.MustNewConstMetric(slotRetainedDesc, prometheus.GaugeValue, retained, m.slot)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
