package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/watermark"
)

// The restore check: no LSN restored from the watermark topic may pass the end of the WAL the
// server has written.
//
// Whoever can write the watermark topic can otherwise choose where cdc resumes: a quiet record
// with watermark FFFFFFFF/FFFFFF00 becomes every quiet table's watermark, the never-backwards
// rule keeps it, and cdc's own records repeat it for ever. Every LSN cdc writes there came from
// the server: a commit's end or a keepalive's WAL end from the stream (the walsender sends only
// WAL that is flushed, or on a standby received or replayed), a snapshot's consistent point, a
// chunk marker's position, the WAL position a removal was noted at. So no value cdc wrote can
// be past the end of the server's WAL (pgcat.WALEndSQL: the insert position on a primary). Every
// LSN of every value read is checked, as it is read: own records' watermark, position and
// consistent point, quiet records' watermark and position, checkpoints' position and partly
// published transaction; also values that a later one supersedes, whose watermark the
// never-backwards rule may still restore.
//
// The slot gives no tighter bound. Its confirmed_flush_lsn is a floor, not a ceiling: cdc
// publishes a change and its watermark before it confirms them, so after a crash Kafka is
// legitimately ahead of the slot by up to a status interval's worth of WAL (checkSlot checks the
// floor). And the slot's own positions are at or below the end of the WAL.
//
// No false refusal, including races: the end of the WAL is read before the topic, and read
// again when a value passes it; a value read from Kafka before that second read was written from
// WAL the server had already written. On a primary the second read is the hard bound. After a
// failover with synchronized_standby_slots the promoted server received everything cdc was sent,
// and promotion replays all of it before its new timeline begins, so its WAL end is at or past
// what Kafka holds; without it, or after a restore from a backup, Kafka may hold WAL this server
// never had, and refusing is right: checkPromotion refuses what is past the switch point, and
// refuseRestore names the failover the same way when the value is past the WAL's end too (the
// restore check comes first). A standby reports what it received or replayed: a standby that
// just restarted, or that is behind the server cdc streamed from before, can be legitimately
// behind Kafka for a while. With CDC_PG_PRIMARY_URL the primary's insert position is the bound;
// without it cdc waits up to restoreCatchUp for the standby to reach the value before it
// refuses.

// restoreCatchUp is how long a restored value past a standby's WAL waits for the standby to
// reach it (CDC_PG_URL names a standby and CDC_PG_PRIMARY_URL is not set).
const restoreCatchUp = 30 * time.Second

// walEnd is the bound the restore check uses and how it was read.
type walEnd struct {
	at   change.LSN
	what string
	// catchUp: the bound is a standby's, without its primary; it may be behind for a while.
	catchUp bool
}

// restoreGuard checks the values of the watermark topic against the end of the server's WAL as
// a TopicReader folds them.
type restoreGuard struct {
	read       func(ctx context.Context) (walEnd, error)
	wait, poll time.Duration
	end        walEnd
	// waitUntil bounds all waiting for a standby, from the first value past it.
	waitUntil time.Time
	waited    time.Duration
	// err is the error that reading the WAL end failed with (not the topic's fault).
	err error
}

// newRestoreGuard returns the guard for the server conn (with its primary, when the source is
// a standby and CDC_PG_PRIMARY_URL is set).
func newRestoreGuard(conn, primary pgcat.Querier) *restoreGuard {
	return &restoreGuard{wait: restoreCatchUp, poll: 200 * time.Millisecond, read: func(ctx context.Context) (walEnd, error) {
		at, standby, err := pgcat.WALEnd(ctx, conn)
		if err != nil {
			return walEnd{}, err
		}
		switch {
		case !standby:
			return walEnd{at: at, what: "the end of this server's WAL (pg_current_wal_insert_lsn())"}, nil
		case primary == nil:
			return walEnd{at: at, catchUp: true, what: "the end of this standby's WAL (received or replayed; CDC_PG_PRIMARY_URL is not set)"}, nil
		}
		p, _, err := pgcat.WALEnd(ctx, primary)
		if err != nil {
			return walEnd{}, fmt.Errorf("on the primary (CDC_PG_PRIMARY_URL): %w", err)
		}
		return walEnd{at: max(at, p), what: "the end of the primary's WAL (pg_current_wal_insert_lsn() through CDC_PG_PRIMARY_URL)"}, nil
	}}
}

// start reads the bound and sets it on rd.
func (g *restoreGuard) start(ctx context.Context, rd *watermark.TopicReader) error {
	end, err := g.read(ctx)
	if err != nil {
		g.err = err
		return err
	}
	g.end = end
	rd.Bound(end.at)
	return nil
}

// add returns the function that folds a value of the topic into rd: a value past the bound is
// tried again under a bound read after it, and refused with a *pastWALError when it passes that
// too. When the bound cannot be read, the function returns that error and g.err holds it.
func (g *restoreGuard) add(ctx context.Context, rd *watermark.TopicReader) func(int32, []byte) error {
	return func(partition int32, value []byte) error {
		err := rd.Add(partition, value)
		for {
			past, ok := errors.AsType[*watermark.PastBoundError](err)
			if !ok {
				return err
			}
			reached, rerr := g.raise(ctx, past.LSN)
			if rerr != nil {
				g.err = rerr
				return rerr
			}
			if !reached {
				return &pastWALError{field: past.Field, lsn: past.LSN, end: g.end, waited: g.waited}
			}
			rd.Bound(g.end.at)
			err = rd.Add(partition, value)
		}
	}
}

// raise reads the bound again and reports whether it reached lsn; a standby's bound is polled
// until it does, or until waitUntil.
func (g *restoreGuard) raise(ctx context.Context, lsn change.LSN) (bool, error) {
	for {
		end, err := g.read(ctx)
		if err != nil {
			return false, err
		}
		g.end = walEnd{at: max(g.end.at, end.at), what: end.what, catchUp: end.catchUp}
		if g.end.at >= lsn {
			return true, nil
		}
		if !g.end.catchUp {
			return false, nil
		}
		now := time.Now()
		if g.waitUntil.IsZero() {
			g.waitUntil = now.Add(g.wait)
		}
		if !now.Before(g.waitUntil) {
			return false, nil
		}
		pause := min(g.poll, g.waitUntil.Sub(now))
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(pause):
		}
		g.waited += pause
	}
}

// pastWALError is a value of the watermark topic with an LSN past the end of the server's WAL.
type pastWALError struct {
	field  string
	lsn    change.LSN
	end    walEnd
	waited time.Duration
}

func (e *pastWALError) Error() string {
	s := fmt.Sprintf("%s %s is past %s, %s", e.field, e.lsn, e.end.what, e.end.at)
	if e.waited > 0 {
		s += fmt.Sprintf(", after waiting %s for it", e.waited.Round(time.Second))
	}
	return s
}

// refuseRestore is the start-up error for a value of the watermark topic past the end of the
// server's WAL: it names the record (topic, partition, offset), the value and the bound, says
// what can have written it and what to do. On a promoted server (tl) a value past the switch
// point most likely holds WAL of the former primary that this server never received, the case
// checkPromotion refuses (it runs later, and would not see a value past the end of the WAL
// first): the message leads with the failover, as checkPromotion's does.
func refuseRestore(cfg Config, bad *sink.RecordError, past *pastWALError, tl replication.Timeline) error {
	record := fmt.Sprintf("watermark topic %s partition %d offset %d: %v", bad.Topic, bad.Partition, bad.Offset, past)
	forged := "the record was not written by cdc for this database (someone else wrote to the watermark topic, " +
		"or the topic belongs to another database: two deployments with one CDC_TOPIC_PREFIX)"
	remedy := fmt.Sprintf("delete the watermark topic %s (every table is copied again) or use a new CDC_TOPIC_PREFIX", cfg.Sink.WatermarkTopic)
	const acl = "let only cdc's principal write the topic (Kafka ACLs; docs/operations.md#restore-check)"
	if tl.ID > 1 && past.lsn > tl.SwitchPoint {
		return fatal(fmt.Errorf("failover: this server was promoted at %s (timeline %d), and %s: "+
			"the record holds WAL of the former primary that this server never received (no synchronized_standby_slots, or a standby that fell behind), "+
			"or %s. cdc does not guess, restores nothing from the topic and stops: %s, set synchronized_standby_slots on the primary "+
			"so that the stream never runs ahead of the standby (docs/production.md#failover), and %s",
			tl.SwitchPoint, tl.ID, record, forged, remedy, acl))
	}
	why := "no change at that position exists on this server yet, so cdc cannot have published it: " + forged +
		", or this database lost WAL that cdc had already published (restored from a backup)"
	if past.end.catchUp {
		why += ", or CDC_PG_URL names a standby that is behind the server cdc published from (wait until it caught up, or set CDC_PG_PRIMARY_URL)"
	}
	return fatal(fmt.Errorf("%s: %s. cdc restores nothing from the topic and stops: find out who wrote the record; then %s, and %s",
		record, why, remedy, acl))
}
