package monitor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
)

// FailoverState is the standby's copy of the failover slot as the monitor last sampled it
// (CDC_SLOT_FAILOVER, and a standby among CDC_PG_URL's hosts): whether it is failover-ready in
// PostgreSQL 17's terms (synced, not temporary, not invalidated), and if not, the condition that
// fails and since when the samples saw it fail.
type FailoverState struct {
	Standby string `json:"standby,omitempty"` // the standby's address
	Ready   bool   `json:"ready"`
	// Condition names what fails: missing, invalidated, not_synced, temporary, or
	// no_standby (no host of CDC_PG_URL is a readable standby); "" when ready.
	Condition string `json:"condition,omitempty"`
	// Reason says it in words (replication.StandbySlot.NotReady).
	Reason string `json:"reason,omitempty"`
	// Since is the first sample of the current state (ready or not).
	Since     time.Time `json:"since"`
	SampledAt time.Time `json:"sampled_at"`
}

// failoverHeldBackWarn is how long the copy stays temporary before the log warns.
const failoverHeldBackWarn = 30 * time.Second

var (
	failoverReadyDesc = prometheus.NewDesc("tidemark_slot_failover_ready",
		"1 when the standby's copy of the failover slot is failover-ready (synced, not temporary, not invalidated: a promotion keeps it), else 0 (CDC_SLOT_FAILOVER and a standby among CDC_PG_URL's hosts).",
		[]string{"slot"}, nil)
	failoverUnreadyDesc = prometheus.NewDesc("tidemark_slot_failover_unready_seconds",
		"Seconds the standby's copy of the failover slot has not been failover-ready, with the failing condition (missing, invalidated, not_synced, temporary, no_standby) in a label; absent when ready.",
		[]string{"slot", "condition"}, nil)
)

// failoverWatch samples the standby's copy of the slot every monitorInterval on a connection
// of its own, for the metrics, /readyz and the status page, and logs when its synchronisation
// stays held back.
type failoverWatch struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	state *FailoverState
	// warned: this not-ready streak was logged.
	warned bool
}

func newFailoverWatch(cfg Config) *failoverWatch {
	if !cfg.SlotFailover {
		return nil
	}
	return &failoverWatch{cfg: cfg, log: cfg.Logger.With("stage", "monitor")}
}

// run samples until ctx ends.
func (w *failoverWatch) run(ctx context.Context) {
	t := time.NewTicker(monitorInterval)
	defer t.Stop()
	var conn *pgcat.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for {
		var err error
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, monitorInterval)
			conn, err = pgcat.ConnectStandby(cctx, w.cfg.PGURL, w.cfg.Timeouts.ConnectOnly())
			cancel()
			if errors.Is(err, pgcat.ErrOneHost) {
				return // nothing to watch: the docs say what to verify on the standby
			}
		}
		var s replication.StandbySlot
		if err == nil {
			qctx, cancel := context.WithTimeout(ctx, monitorInterval)
			s, err = replication.ReadStandbySlot(qctx, conn, w.cfg.Slot)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		host := ""
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
		} else {
			host = conn.PgConn().Conn().RemoteAddr().String()
		}
		w.record(time.Now(), host, s, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// record keeps a sample (err: the standby could not be read) and logs the transitions.
func (w *failoverWatch) record(now time.Time, host string, s replication.StandbySlot, err error) {
	next := FailoverState{Standby: host, Ready: err == nil && s.FailoverReady(), SampledAt: now, Since: now}
	switch {
	case err != nil:
		next.Condition, next.Reason = "no_standby", "no host of CDC_PG_URL is a readable standby: "+err.Error()
	case !next.Ready:
		next.Condition, next.Reason = failoverCondition(s), s.NotReady()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.state
	if prev != nil && prev.Ready == next.Ready && prev.Condition == next.Condition {
		next.Since = prev.Since
	} else {
		w.warned = false
	}
	w.state = &next
	switch {
	case next.Ready && prev != nil && !prev.Ready:
		w.log.Info("the standby's copy of the failover slot is failover-ready: a promotion keeps it",
			"slot", w.cfg.Slot, "standby", host, "after", now.Sub(prev.Since).Round(time.Second).String())
	case !next.Ready && !w.warned && (next.Condition != "temporary" || now.Sub(next.Since) >= failoverHeldBackWarn):
		w.warned = true
		msg := "the standby's copy of the failover slot is not failover-ready: a promotion now would lose it"
		if next.Condition == "no_standby" {
			// After a promotion, until a new standby is set up: nothing to promote.
			msg = "no standby among CDC_PG_URL's hosts can be read: the failover slot has no copy that a promotion would keep"
		}
		w.log.Warn(msg, "slot", w.cfg.Slot, "standby", host, "condition", next.Condition, "reason", next.Reason,
			"for", now.Sub(next.Since).Round(time.Second).String(), "doc", "docs/production.md#failover")
	}
}

// failoverCondition is the label of the condition s.NotReady names.
func failoverCondition(s replication.StandbySlot) string {
	switch {
	case !s.Exists:
		return "missing"
	case s.Invalidation != "":
		return "invalidated"
	case !s.Synced:
		return "not_synced"
	case s.Temporary:
		return "temporary"
	}
	return ""
}

// current returns the last sample (nil: none, or not watched).
func (w *failoverWatch) current() *FailoverState {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == nil {
		return nil
	}
	s := *w.state
	return &s
}

// collect reports the last sample, unless it is stale.
func (w *failoverWatch) collect(ch chan<- prometheus.Metric, now time.Time) {
	s := w.current()
	if s == nil || now.Sub(s.SampledAt) >= monitorStale {
		return
	}
	ch <- prometheus.MustNewConstMetric(failoverReadyDesc, prometheus.GaugeValue, boolValue(s.Ready), w.cfg.Slot)
	if !s.Ready {
		ch <- prometheus.MustNewConstMetric(failoverUnreadyDesc, prometheus.GaugeValue, now.Sub(s.Since).Seconds(), w.cfg.Slot, s.Condition)
	}
}
