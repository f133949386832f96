package schemareg

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// retry calls fn until it succeeds, fails with an error that is not transient, or ctx ends,
// backing off exponentially with jitter between attempts. Each attempt's outcome updates Status.
func (c *Client) retry(ctx context.Context, fn func(context.Context) error) error {
	wait := c.retryMin
	var last error // the last failure that was not the context's end
	ended := func(attempts int) error {
		if last == nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("schema registry unreachable after %d attempts: %w; last failure: %w", attempts, context.Cause(ctx), last)
	}
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			c.answered()
			return nil
		}
		if ctx.Err() != nil {
			if !errors.Is(err, ctx.Err()) {
				last = err
			}
			return ended(attempt)
		}
		if !transient(err) {
			// A refusal is an answer, unless it refuses cdc itself (its credentials), as a
			// certificate that does not verify is none: Status keeps those, explained (so that
			// it says what to fix and is ErrUnauthorized or ErrTLS).
			if e := c.explain(err); errors.Is(e, ErrUnauthorized) || errors.Is(e, ErrTLS) {
				c.failed(e)
			} else {
				c.answered()
			}
			return err
		}
		last = err
		c.failed(err)
		// Half to all of wait: clients that lost the registry together do not return together.
		sleep := wait/2 + rand.N(wait/2+1)
		c.log.Warn("schema registry unreachable; retrying", "url", c.url, "attempt", attempt,
			"retry_in", sleep.Round(time.Millisecond), "error", err)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return ended(attempt)
		case <-t.C:
		}
		wait = min(wait*2, c.retryMax)
	}
}

// answered records that the registry answered (with success or a refusal).
func (c *Client) answered() {
	c.mu.Lock()
	c.status = Status{}
	c.mu.Unlock()
}

// failed records a transient failure.
func (c *Client) failed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status.Since.IsZero() {
		c.status.Since = time.Now()
	}
	c.status.Err = err
	c.status.Attempts++
}
