package preflight

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/replication"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
		err  bool
	}{
		{args: nil},
		{args: []string{"--wait-failover-ready"}, want: defaultFailoverWait},
		{args: []string{"--wait-failover-ready=90s"}, want: 90 * time.Second},
		{args: []string{"--wait-failover-ready=0s"}, err: true},
		{args: []string{"--wait-failover-ready=soon"}, err: true},
		{args: []string{"--verbose"}, err: true},
	} {
		got, err := ParseArgs(tc.args)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ParseArgs(%q) = %s, %v; want %s (error %v)", tc.args, got, err, tc.want, tc.err)
		}
	}
}

// TestStandbyCopyLines: cdc check passes the standby's copy only when PostgreSQL would keep it
// at a promotion, passes its absence before the first start, and otherwise names the condition
// that fails.
func TestStandbyCopyLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		exists bool // on the primary
		copy   replication.StandbySlot
		ok     bool
		says   string
	}{
		{name: "failover-ready", exists: true, copy: replication.StandbySlot{Exists: true, Synced: true}, ok: true, says: "is failover-ready"},
		{name: "before the first start", copy: replication.StandbySlot{}, ok: true, says: "as expected before cdc's first start"},
		{name: "not synchronised yet", exists: true, copy: replication.StandbySlot{}, says: "not failover-ready: missing"},
		{name: "held back", exists: true, copy: replication.StandbySlot{Exists: true, Synced: true, Temporary: true}, says: "not failover-ready: temporary (synchronisation held back"},
		{name: "invalidated", exists: true, copy: replication.StandbySlot{Exists: true, Synced: true, Invalidation: "wal_removed"}, says: "invalidation_reason = wal_removed"},
		{name: "the standby's own", exists: true, copy: replication.StandbySlot{Exists: true}, says: "not synced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &checker{cfg: pipeline.Config{Slot: "tidemark"}}
			p.standbyCopy("127.0.0.1:5433", tc.exists, tc.copy)
			if len(p.lines) != 1 {
				t.Fatalf("lines = %+v", p.lines)
			}
			l := p.lines[0]
			if l.ok != tc.ok || l.warn || !strings.Contains(l.what, tc.says) {
				t.Errorf("line = %+v, want ok %v saying %q", l, tc.ok, tc.says)
			}
			if !tc.ok && !strings.Contains(l.fix, "--wait-failover-ready") && !strings.Contains(l.fix, "drop the standby's own slot") {
				t.Errorf("fix %q names no way out", l.fix)
			}
		})
	}
}
