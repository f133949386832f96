package preflight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tidemark/cdc/internal/posture"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// defaultFailoverWait is how long `cdc check --wait-failover-ready` waits without a duration.
const defaultFailoverWait = 10 * time.Minute

// failoverPoll is how often the wait reads the standby's copy of the slot.
const failoverPoll = 500 * time.Millisecond

// ParseArgs reads the options of `cdc check`: --wait-failover-ready[=DURATION] (0: do not
// wait).
func ParseArgs(args []string) (wait time.Duration, err error) {
	for _, a := range args {
		name, value, hasValue := strings.Cut(a, "=")
		if name != "--wait-failover-ready" && name != "-wait-failover-ready" {
			return 0, fmt.Errorf("unknown option %q (cdc check takes --wait-failover-ready[=DURATION])", a)
		}
		wait = defaultFailoverWait
		if hasValue {
			if wait, err = time.ParseDuration(value); err != nil || wait <= 0 {
				return 0, fmt.Errorf("--wait-failover-ready=%s: want a positive duration such as 90s or 10m", value)
			}
		}
	}
	return wait, nil
}

// Check is `cdc check` with its options: with wait > 0 it first waits up to wait for the
// standby's copy of the slot to be failover-ready (WaitFailoverReady), and when it does not
// become so it still runs the checks (unless ctx ended) but fails. It reports whether every
// check passed.
func Check(ctx context.Context, cfg pipeline.Config, postures []posture.Posture, registry schemareg.Config, wait time.Duration, w io.Writer) (ok bool) {
	if wait > 0 && !WaitFailoverReady(ctx, cfg, wait, w) {
		if ctx.Err() == nil {
			fmt.Fprintln(w)
			Run(ctx, cfg, postures, registry, w)
		}
		return false
	}
	return Run(ctx, cfg, postures, registry, w)
}

// WaitFailoverReady reads the standby's copy of the slot (a standby among CDC_PG_URL's hosts)
// until it is failover-ready in PostgreSQL's terms (synced, not temporary, not invalidated) or
// timeout passes, and prints each condition that held it back and for how long. It reports
// whether the copy became ready.
func WaitFailoverReady(ctx context.Context, cfg pipeline.Config, timeout time.Duration, w io.Writer) bool {
	begin := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn *pgcat.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	fmt.Fprintf(w, "waiting up to %s for the standby's copy of replication slot %s to be failover-ready (synced, not temporary, not invalidated)\n", timeout, cfg.Slot)
	why, since, lastErr := "", begin, ""
	for {
		state, err := "", error(nil)
		if conn == nil {
			conn, err = pgcat.ConnectStandby(ctx, cfg.PGURL, pgcat.Timeouts{Connect: cfg.ConnectTimeout})
			if errors.Is(err, pgcat.ErrOneHost) {
				fmt.Fprintf(w, "✗ cannot wait: CDC_PG_URL names one host, so the standby cannot be read (%s)\n", failoverDoc)
				return false
			}
		}
		var s replication.StandbySlot
		if err == nil {
			if s, err = replication.ReadStandbySlot(ctx, conn, cfg.Slot); err != nil {
				conn.Close(context.Background())
				conn = nil
			}
		}
		switch {
		case err != nil && ctx.Err() == nil:
			if msg := err.Error(); msg != lastErr {
				fmt.Fprintf(w, "  standby not readable: %v\n", err)
				lastErr = msg
			}
		case err == nil && s.FailoverReady():
			fmt.Fprintf(w, "✓ the standby's copy of replication slot %s is failover-ready after %s", cfg.Slot, time.Since(begin).Round(100*time.Millisecond))
			if why != "" {
				fmt.Fprintf(w, " (it was %s for %s)", why, time.Since(since).Round(100*time.Millisecond))
			}
			fmt.Fprintln(w)
			return true
		case err == nil:
			state = s.NotReady()
		}
		if state != "" && state != why {
			if why != "" {
				fmt.Fprintf(w, "  it was %s for %s\n", why, time.Since(since).Round(100*time.Millisecond))
			}
			fmt.Fprintf(w, "  %s: %s\n", time.Since(begin).Round(100*time.Millisecond), state)
			why, since = state, time.Now()
		}
		select {
		case <-ctx.Done():
			what := why
			if what == "" {
				what = "not readable"
			}
			fmt.Fprintf(w, "✗ the standby's copy of replication slot %s is not failover-ready after %s: %s for %s; a promotion now would lose the slot (%s)\n",
				cfg.Slot, time.Since(begin).Round(100*time.Millisecond), what, time.Since(since).Round(100*time.Millisecond), failoverDoc)
			return false
		case <-time.After(failoverPoll):
		}
	}
}
