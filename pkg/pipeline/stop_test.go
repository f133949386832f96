package pipeline

import (
	"testing"
	"time"
)

func TestStopBudget(t *testing.T) {
	begin := time.Unix(1000, 0)
	for _, tc := range []struct {
		timeout            time.Duration
		drain, confirmDone time.Duration
	}{
		{20 * time.Second, 14 * time.Second, 19 * time.Second},
		{2 * time.Second, 1300 * time.Millisecond, 1800 * time.Millisecond},
		{10 * time.Minute, 10*time.Minute - 6*time.Second, 10*time.Minute - time.Second},
	} {
		drainBy, confirmBy := stopBudget(begin, tc.timeout)
		if got := drainBy.Sub(begin); got != tc.drain {
			t.Errorf("timeout %s: drain until %s, want %s", tc.timeout, got, tc.drain)
		}
		if got := confirmBy.Sub(begin); got != tc.confirmDone {
			t.Errorf("timeout %s: confirm until %s, want %s", tc.timeout, got, tc.confirmDone)
		}
	}
}
