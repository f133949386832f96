package pipeline

import (
	"context"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/watermark"
)

// The acknowledgement path: the sink reports what Kafka holds (sink.Acker, ackPort), the owner applies it
// to the tracker and answers with the records to write (watermarks, the quiet record, the
// checkpoint), as data.

// durable applies units the sink made durable, in order, and returns the watermark records due.
func (o *owner) durable(units []*change.Unit, offsets change.Offsets) []change.Record {
	now := time.Now()
	var stop []change.ExportID
	pieces := false
	for _, u := range units {
		switch u.Kind {
		case change.KindTxn, change.KindProgress:
			if u.Piece != nil {
				pieces = true
				o.partial = partialAfter(u)
			}
			// A piece before the last has no End: the position stays before its transaction.
			if u.Piece == nil || u.Piece.Last {
				o.tracker.Advance(u.End)
			}
		case change.KindSnapshot:
			o.tracker.SnapshotRows(u.Export, int64(u.Rows))
		case change.KindSnapshotDone:
			o.tracker.SnapshotCopied(u.Export, now)
			// Acted on once committed: reconciling reads the topic read-committed.
			o.copied = append(o.copied, u.Export)
		case change.KindChunk:
			o.tracker.ChunkDone(u.Export, u.Chunk, now)
		case change.KindHydrated:
			o.toHydrated(u.Export, u.End)
		case change.KindRemoved:
			o.toRemoved(u.Export, u.End)
		case change.KindFailed:
			if o.toFailed(u.Export, u.Err) {
				o.failures[u.Export] = failureClass(u.Cause)
			}
			stop = append(stop, u.Export)
		}
	}
	var recs []watermark.Record
	var quiet *watermark.Quiet
	if o.partial == nil {
		// While a transaction is partly published its records would lie below the offsets of
		// any watermark record: records wait until its last piece is durable. (The stream
		// position does not move meanwhile, and the sink starts a new batch at a transaction's
		// first piece, so nothing else waits behind it: only state changes of exports being
		// copied, which a restart repeats anyway.)
		recs = o.tracker.Due(now, func(topic string) map[int32]int64 { return offsets[topic] })
		if q, ok := o.tracker.Quiet(now); ok {
			quiet = &q
		}
	}
	out := make([]change.Record, 0, len(recs))
	var announced map[change.ExportID]bool
	for _, r := range recs {
		v, err := watermark.Encode(r)
		if err != nil {
			o.log.Error("encode watermark record", "export", r.Export.String(), "err", err)
			continue
		}
		out = append(out, change.Record{Topic: o.cfg.Sink.WatermarkTopic, Partition: change.AnyPartition, Key: r.Key(), Value: v})
		if o.recopies[r.Export] != nil {
			if announced == nil {
				announced = make(map[change.ExportID]bool)
			}
			announced[r.Export] = true
		}
	}
	o.recopiesDue(announced)
	// One record for every quiet export, after their own records.
	if quiet != nil {
		if v, err := watermark.EncodeQuiet(*quiet); err != nil {
			o.log.Error("encode quiet watermark record", "err", err)
		} else {
			out = append(out, change.Record{Topic: o.cfg.Sink.WatermarkTopic, Partition: change.AnyPartition, Key: []byte(watermark.QuietKey), Value: v})
		}
	}
	// After Due: the records above carry every state transition up to this point, so the
	// checkpoint applies to exactly the exports they (or earlier records) say follow the stream.
	// (In exactly-once mode carry wrote it already, into the same transaction.)
	if lsn, ok := o.tracker.Checkpoint(); ok {
		out = o.appendCheckpoint(out, lsn, o.partial, now)
	} else if pieces && o.partial != nil && o.cfg.Sink.Delivery == sink.AtLeastOnce {
		// The pieces acknowledged so far are skipped if the process restarts.
		out = o.appendCheckpoint(out, o.tracker.CheckpointPosition(), o.partial, now)
	}
	for _, e := range stop {
		o.chunks.Stop(e)
	}
	return out
}

// carry returns the checkpoint of an exactly-once transaction, produced with its units: the end
// of its last stream unit. durable, run before the same transaction commits, adds the
// watermark records of every state transition, so the checkpoint covers the same exports as if
// it were written after them.
//
// A transaction of several pieces is published in several Kafka transactions. Each one that
// holds pieces carries a checkpoint naming the changes of the transaction durable with it
// (change.Partial), at an unchanged position until the last piece, so that a restart publishes
// neither those changes again nor any change after them twice.
func (o *owner) carry(units []*change.Unit) []change.Record {
	var end change.LSN
	partial, pieces := o.partial, false
	for _, u := range units {
		if u.Kind == change.KindTxn || u.Kind == change.KindProgress {
			end = max(end, u.End)
			if u.Piece != nil {
				partial, pieces = partialAfter(u), true
			}
		}
	}
	var lsn change.LSN
	ok := false
	if end != 0 {
		lsn, ok = o.tracker.CheckpointAt(end)
	}
	if !ok && pieces && partial != nil {
		lsn, ok = o.tracker.CheckpointPosition(), true
	}
	if !ok {
		return nil
	}
	return o.appendCheckpoint(nil, lsn, partial, time.Now())
}

// partialAfter is the partly published transaction once piece unit u is durable.
func partialAfter(u *change.Unit) *change.Partial {
	if u.Piece.Last {
		return nil
	}
	return &change.Partial{Commit: u.Commit, Changes: u.Piece.Changes}
}

func (o *owner) appendCheckpoint(out []change.Record, lsn change.LSN, partial *change.Partial, now time.Time) []change.Record {
	v, err := watermark.EncodeCheckpointOn(o.origin, lsn, partial, now)
	if err != nil {
		o.log.Error("encode checkpoint", "lsn", lsn.String(), "err", err)
		return out
	}
	return append(out, change.Record{Topic: o.cfg.Sink.WatermarkTopic, Partition: change.AnyPartition, Key: []byte(watermark.CheckpointKey), Value: v})
}

// committed marks the last records durable; copies that became durable move on.
func (o *owner) committed() {
	o.tracker.Published()
	o.recopiesCommitted()
	copied := o.copied
	o.copied = nil
	for _, e := range copied {
		if o.phases[e] == phaseCopying {
			o.setPhase(e, phaseReleasing)
		}
	}
	var done []change.ExportID
	for _, e := range copied {
		if !o.copyDurable(e) {
			done = append(done, e)
		}
	}
	for _, e := range done {
		o.repl.CopyDone(e)
	}
}

// ackKind says what an ack reports: the calls of sink.Acker, in their order per batch.
type ackKind uint8

const (
	ackProduced ackKind = iota + 1
	ackDurable
	ackCommitted
)

// ack is a report of the sink to the owner, made by ackPort: data on the owner's acks channel.
// reply (capacity 1) takes the records to produce; nil for ackCommitted.
type ack struct {
	kind    ackKind
	units   []*change.Unit
	offsets change.Offsets
	reply   chan []change.Record
}

// ackPort is the sink's Acker: each call becomes an ack on the owner's channel, and the sink
// waits only for the reply of Produced and Durable.
type ackPort struct{ in *inbox }

var _ sink.Acker = ackPort{}

func (p ackPort) ask(ctx context.Context, a ack) ([]change.Record, error) {
	a.reply = make(chan []change.Record, 1)
	select {
	case p.in.acks <- a:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case recs := <-a.reply:
		return recs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p ackPort) Produced(ctx context.Context, units []*change.Unit) ([]change.Record, error) {
	return p.ask(ctx, ack{kind: ackProduced, units: units})
}

func (p ackPort) Durable(ctx context.Context, units []*change.Unit, offsets change.Offsets) ([]change.Record, error) {
	return p.ask(ctx, ack{kind: ackDurable, units: units, offsets: offsets})
}

func (p ackPort) Committed(ctx context.Context) error {
	select {
	case p.in.acks <- ack{kind: ackCommitted}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
