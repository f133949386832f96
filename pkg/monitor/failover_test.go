package monitor

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/cdc/pkg/replication"
)

// collectorFunc adapts failoverWatch.collect for testutil.
type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	ch <- failoverReadyDesc
	ch <- failoverUnreadyDesc
}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// TestFailoverWatch: the standby's copy is failover-ready only as PostgreSQL defines it; the
// failing condition and how long it has failed reach the state, the metrics and the log (a
// temporary copy only once it has stayed so for failoverHeldBackWarn).
func TestFailoverWatch(t *testing.T) {
	var log bytes.Buffer
	w := newFailoverWatch(Config{Slot: "tidemark", SlotFailover: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	held := replication.StandbySlot{Exists: true, Synced: true, Temporary: true}
	w.record(t0, "127.0.0.1:5433", held, nil)
	w.record(t0.Add(10*time.Second), "127.0.0.1:5433", held, nil)
	s := w.current()
	if s.Ready || s.Condition != "temporary" || !s.Since.Equal(t0) || !strings.Contains(s.Reason, "held back") {
		t.Errorf("state = %+v, want temporary since t0", s)
	}
	if strings.Contains(log.String(), "not failover-ready") {
		t.Errorf("warned after 10s of a temporary copy: %s", log.String())
	}
	w.record(t0.Add(31*time.Second), "127.0.0.1:5433", held, nil)
	if !strings.Contains(log.String(), "condition=temporary") {
		t.Errorf("no warning after 31s of a temporary copy: %s", log.String())
	}
	now := t0.Add(32 * time.Second)
	metrics := collectorFunc(func(ch chan<- prometheus.Metric) { w.collect(ch, now) })
	want := `
# HELP tidemark_slot_failover_ready 1 when the standby's copy of the failover slot is failover-ready (synced, not temporary, not invalidated: a promotion keeps it), else 0 (CDC_SLOT_FAILOVER and a standby among CDC_PG_URL's hosts).
# TYPE tidemark_slot_failover_ready gauge
tidemark_slot_failover_ready{slot="tidemark"} 0
# HELP tidemark_slot_failover_unready_seconds Seconds the standby's copy of the failover slot has not been failover-ready, with the failing condition (missing, invalidated, not_synced, temporary, no_standby) in a label; absent when ready.
# TYPE tidemark_slot_failover_unready_seconds gauge
tidemark_slot_failover_unready_seconds{condition="temporary",slot="tidemark"} 32
`
	if err := testutil.CollectAndCompare(metrics, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	w.record(now, "127.0.0.1:5433", replication.StandbySlot{Exists: true, Synced: true}, nil)
	if s := w.current(); !s.Ready || s.Condition != "" || !s.Since.Equal(now) {
		t.Errorf("state = %+v, want ready since now", s)
	}
	if !strings.Contains(log.String(), "is failover-ready") {
		t.Errorf("no log line when it became ready: %s", log.String())
	}
	w.record(now.Add(time.Second), "", replication.StandbySlot{}, errors.New("connection refused"))
	if s := w.current(); s.Ready || s.Condition != "no_standby" {
		t.Errorf("state = %+v, want no_standby", s)
	}
	if newFailoverWatch(Config{}) != nil {
		t.Error("watching without CDC_SLOT_FAILOVER")
	}
}
