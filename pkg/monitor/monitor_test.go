package monitor

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/cdc/pkg/change"
)

func TestLagSeconds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	wal := []walSample{{t0, 100}, {t0.Add(5 * time.Second), 200}, {t0.Add(10 * time.Second), 300}}
	now := t0.Add(12 * time.Second)
	for _, tc := range []struct {
		name string
		w    change.LSN
		want float64
	}{
		{"at the end", 300, 0},
		{"past the end", 400, 0},
		{"passed at the last sample", 250, 2},
		{"passed at the second sample", 199, 7},
		{"exactly at a sample is not behind it", 200, 2},
		{"older than every sample: the oldest's age", 50, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lagSeconds(wal, tc.w, now); got != tc.want {
				t.Errorf("lagSeconds(%d) = %v, want %v", tc.w, got, tc.want)
			}
		})
	}
	if got := lagSeconds(nil, 1, now); got != 0 {
		t.Errorf("lagSeconds without samples = %v, want 0", got)
	}
}

func TestMonitorRecordKeepsMovesWithinHistory(t *testing.T) {
	m := New(Config{Slot: "s"}, notReady{})
	t0 := time.Now()
	for i := range walHistory + 10 {
		at := t0.Add(time.Duration(i) * time.Second)
		m.record(walSample{at: at, lsn: change.LSN(1000 + i)}, slotSample{at: at})
		m.record(walSample{at: at.Add(time.Millisecond), lsn: change.LSN(1000 + i)}, slotSample{at: at}) // no move
	}
	if len(m.wal) != walHistory {
		t.Fatalf("kept %d samples, want %d", len(m.wal), walHistory)
	}
	if first := m.wal[0]; first.lsn != 1010 || !first.at.Equal(t0.Add(10*time.Second)) {
		t.Errorf("oldest sample %+v, want LSN 1010 at its first sighting", first)
	}
}

func TestMonitorCollect(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	safe := int64(3 << 20)
	for _, tc := range []struct {
		name string
		slot slotSample
		age  time.Duration
		want string
	}{
		{
			name: "limited slot",
			slot: slotSample{exists: true, restart: 0x1000, retained: true, status: "reserved", keep: 64 << 20, safe: &safe},
			want: `
# HELP tidemark_ready 1 when the pipeline streams and no live table failed (as /readyz answers 200), else 0.
# TYPE tidemark_ready gauge
tidemark_ready 0
# HELP tidemark_slot_wal_keep_size_bytes The server's max_slot_wal_keep_size in bytes (absent when unlimited, -1).
# TYPE tidemark_slot_wal_keep_size_bytes gauge
tidemark_slot_wal_keep_size_bytes{slot="s"} 6.7108864e+07
# HELP tidemark_slot_wal_retained_bytes WAL bytes the replication slot retains: the server's current WAL position minus the slot's restart_lsn.
# TYPE tidemark_slot_wal_retained_bytes gauge
tidemark_slot_wal_retained_bytes{slot="s"} 4096
# HELP tidemark_slot_wal_safe_size_bytes WAL bytes that can still be written before the slot is in danger of being invalidated (pg_replication_slots.safe_wal_size; absent when unlimited).
# TYPE tidemark_slot_wal_safe_size_bytes gauge
tidemark_slot_wal_safe_size_bytes{slot="s"} 3.145728e+06
# HELP tidemark_slot_wal_status Always 1: the slot's pg_replication_slots.wal_status (reserved, extended, unreserved, lost) in a label.
# TYPE tidemark_slot_wal_status gauge
tidemark_slot_wal_status{slot="s",status="reserved"} 1
`,
		},
		{
			name: "unlimited slot",
			slot: slotSample{exists: true, restart: 0x1000, retained: true, status: "reserved", keep: -1},
			want: `
# HELP tidemark_ready 1 when the pipeline streams and no live table failed (as /readyz answers 200), else 0.
# TYPE tidemark_ready gauge
tidemark_ready 0
# HELP tidemark_slot_wal_retained_bytes WAL bytes the replication slot retains: the server's current WAL position minus the slot's restart_lsn.
# TYPE tidemark_slot_wal_retained_bytes gauge
tidemark_slot_wal_retained_bytes{slot="s"} 4096
# HELP tidemark_slot_wal_status Always 1: the slot's pg_replication_slots.wal_status (reserved, extended, unreserved, lost) in a label.
# TYPE tidemark_slot_wal_status gauge
tidemark_slot_wal_status{slot="s",status="reserved"} 1
`,
		},
		{
			name: "no slot yet",
			slot: slotSample{keep: -1},
			want: `
# HELP tidemark_ready 1 when the pipeline streams and no live table failed (as /readyz answers 200), else 0.
# TYPE tidemark_ready gauge
tidemark_ready 0
`,
		},
		{
			name: "stale sample",
			slot: slotSample{exists: true, restart: 0x1000, retained: true, status: "reserved", keep: -1},
			age:  monitorStale,
			want: `
# HELP tidemark_ready 1 when the pipeline streams and no live table failed (as /readyz answers 200), else 0.
# TYPE tidemark_ready gauge
tidemark_ready 0
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Config{Slot: "s"}, notReady{})
			m.now = func() time.Time { return t0.Add(tc.age) }
			tc.slot.at = t0
			m.record(walSample{at: t0, lsn: 0x2000}, tc.slot)
			if err := testutil.CollectAndCompare(m, strings.NewReader(tc.want)); err != nil {
				t.Error(err)
			}
			problems, err := testutil.CollectAndLint(m)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
		})
	}
}

// notReady is a pipeline that is not ready and has no exports.
type notReady struct{}

func (notReady) Ready() bool       { return false }
func (notReady) Exports() []Export { return nil }
