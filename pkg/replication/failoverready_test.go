package replication

import (
	"strings"
	"testing"
)

func TestStandbySlotFailoverReady(t *testing.T) {
	for _, tc := range []struct {
		name     string
		slot     StandbySlot
		ready    bool
		heldBack bool
		says     string
	}{
		{name: "ready", slot: StandbySlot{Exists: true, Synced: true}, ready: true},
		{name: "missing", slot: StandbySlot{}, says: "missing"},
		{name: "temporary", slot: StandbySlot{Exists: true, Synced: true, Temporary: true}, heldBack: true, says: "temporary (synchronisation held back"},
		{name: "the standby's own", slot: StandbySlot{Exists: true}, says: "not synced"},
		{name: "invalidated", slot: StandbySlot{Exists: true, Synced: true, Invalidation: "rows_removed"}, says: "invalidated (invalidation_reason = rows_removed)"},
		{name: "invalidated and temporary", slot: StandbySlot{Exists: true, Synced: true, Temporary: true, Invalidation: "wal_removed"}, says: "invalidated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.slot.FailoverReady(); got != tc.ready {
				t.Errorf("FailoverReady = %v, want %v", got, tc.ready)
			}
			if got := tc.slot.HeldBack(); got != tc.heldBack {
				t.Errorf("HeldBack = %v, want %v", got, tc.heldBack)
			}
			if got := tc.slot.NotReady(); (got == "") != tc.ready || !strings.HasPrefix(got, tc.says) {
				t.Errorf("NotReady = %q, want %q", got, tc.says)
			}
		})
	}
}
