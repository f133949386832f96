package snapshot

import (
	"context"
	"slices"
	"time"
)

// tick logs the progress of copies that published no chunk for a while (slow reads, a sink
// that waits for Kafka), so a long copy reports at least every Config.ProgressInterval.
func (c *Chunker) tick(ctx context.Context) {
	t := time.NewTicker(min(c.cfg.ProgressInterval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.mu.Lock()
			var ps []*progress
			for _, tb := range c.tables {
				if tb.progress != nil {
					ps = append(ps, tb.progress)
				}
			}
			c.mu.Unlock()
			for _, p := range ps {
				p.tick(now)
			}
		}
	}
}

// take returns a table to work on and the chunk to read: one waiting to be read again, or the
// table's next chunk, open-ended after its cursor. A table whose open chunk is being read has
// no next chunk until that read ends. It blocks until there is work.
func (c *Chunker) take(ctx context.Context) (*chunkTable, *plannedChunk, error) {
	for {
		c.mu.Lock()
		var best *chunkTable
		for _, t := range c.tables {
			if t.stopped || (len(t.retry) == 0 && (t.exhausted || t.reading)) {
				continue
			}
			if best == nil || t.remaining > best.remaining {
				best = t
			}
		}
		if best != nil {
			best.busy++
			var ch *plannedChunk
			if n := len(best.retry); n > 0 {
				ch, best.retry = best.retry[0], best.retry[1:]
			} else {
				ch = best.claim()
			}
			c.mu.Unlock()
			return best, ch, nil
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-c.wake:
		case <-time.After(time.Second):
		}
	}
}

// done is called when a worker is done with a chunk of t: handed over (ok) or to be read again.
func (c *Chunker) done(t *chunkTable, ch *plannedChunk, ok bool) {
	c.mu.Lock()
	t.busy--
	if !ok && ch != nil {
		if t.stopped {
			ch.slot.Return()
		} else {
			t.retry = append(t.retry, ch)
		}
	}
	complete := !t.stopped && t.exhausted && t.busy == 0 && len(t.retry) == 0
	if complete {
		t.stopped = true // the copy is over for the chunker
		c.tables = slices.DeleteFunc(c.tables, func(x *chunkTable) bool { return x == t })
	}
	c.mu.Unlock()
	if complete {
		t.progress.finish(time.Now(), "")
		c.hooks.CopyComplete(t.job.Export, t.nextSeq)
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// failTable stops t for good.
func (c *Chunker) failTable(t *chunkTable, err error) {
	c.mu.Lock()
	already := t.stopped
	t.stop()
	c.tables = slices.DeleteFunc(c.tables, func(x *chunkTable) bool { return x == t })
	c.mu.Unlock()
	if !already {
		if t.progress != nil {
			t.progress.finish(time.Now(), err.Error())
		}
		c.hooks.Failed(t.job.Export, err)
	}
}
