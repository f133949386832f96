package integration

import (
	"testing"
	"time"
)

// clock measures how far the wall clock moved beyond the monotonic clock over a test's window.
//
// Durations that cdc logs or paces itself by (progress every 10 s, the snapshot's "took") run on
// the monotonic clock, while record times are wall-clock stamps. The two part when the machine is
// paused and resumed: on the CI's virtual machines the monotonic clock stops during a pause and the
// wall clock is stepped forward after it. In one CI run a copy's stamps were 63.5 s apart while cdc
// had measured 37.5 s, and a test that expected a progress line per 10 s of stamps failed.
type clock struct{ start time.Time }

func startClock() clock { return clock{start: time.Now()} }

// jump is how much more the wall clock advanced than the monotonic clock since start: about 0
// normally, the length of a pause or a forward step otherwise (negative after a backward step).
func (c clock) jump() time.Duration {
	now := time.Now()
	return now.Round(0).Sub(c.start.Round(0)) - now.Sub(c.start)
}

// running is d, a span between two wall-clock stamps inside the clock's window, less any forward
// jump of the wall clock in the window: the time the machine ran. It logs a jump over 100 ms.
func (c clock) running(t testing.TB, what string, d time.Duration) time.Duration {
	t.Helper()
	j := c.jump()
	if j <= 100*time.Millisecond {
		return d
	}
	t.Logf("the wall clock ran %s ahead of the monotonic clock since %s (the machine was paused or its clock stepped): %s counts as %s",
		j.Round(time.Millisecond), c.start.Format(time.TimeOnly), what, (d - j).Round(time.Millisecond))
	return max(d-j, 0)
}
