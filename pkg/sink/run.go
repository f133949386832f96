package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
)

// Acker is who the sink reports each batch to, and who says what else the batch writes (in the
// pipeline, the owner of the watermark records). The sink calls it, so it is declared here; it
// waits for each call, never for anything else. In this order per batch: Produced (exactly-once
// only), Durable, Committed; every Durable is followed by exactly one Committed unless Run fails
// in between. A call returns ctx's error when ctx ends first.
type Acker interface {
	// Produced: the batch's units are produced and not flushed yet (exactly-once mode). It
	// returns the records that must commit in the same transaction and need no offsets (a
	// checkpoint); producing them with the units saves a round trip.
	Produced(ctx context.Context, units []*change.Unit) ([]change.Record, error)
	// Durable: every record of units is acknowledged by Kafka (in exactly-once mode: while
	// their transaction is still open, after Flush). units may be empty (a tick with nothing
	// new). offsets are the next offsets per topic and partition (read-only: the receiver
	// may keep it, and must not write it; later calls may share its maps). It returns the records to produce in the same batch or transaction, typically
	// watermarks; they may target any topic.
	Durable(ctx context.Context, units []*change.Unit, offsets change.Offsets) ([]change.Record, error)
	// Committed: the records Durable returned are durable too (acknowledged, or the
	// transaction committed).
	Committed(ctx context.Context) error
}

// batch is the state of one batch (one transaction in exactly-once mode).
type batch struct {
	start    time.Time
	units    []*change.Unit
	bytes    int // estimated bytes of units
	limit    int // MaxBatchBytes, or MaxBulkBatchBytes once a snapshot unit is in
	records  int // records produced, AllPartitions copies counted
	recBytes int
	txn      bool     // a Kafka transaction is open
	prod     producer // the Sink's prod, or prodLarge for a batch that holds a large record
	large    bool     // prod is prodLarge
	// ts is the timestamp of the records being produced: read once per unit (and once per
	// call for the owner's records), not once per record by franz-go.
	ts time.Time
}

// Run consumes units until in is closed (it then finishes the open batch and returns nil) or
// ctx ends (it returns ctx's error; in exactly-once mode the open transaction is aborted).
// Any produce or transaction error ends Run with that error.
func (s *Sink) Run(ctx context.Context, in <-chan *change.Unit, acks Acker) error {
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	linger := time.NewTimer(s.cfg.Linger)
	linger.Stop()
	defer linger.Stop()

	for {
		var first *change.Unit
		if s.next != nil {
			// The first piece of a large transaction that closed the previous batch.
			first, s.next = s.next, nil
		} else {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case u, ok := <-in:
				if !ok {
					return nil
				}
				if u == nil {
					continue
				}
				first = u
			case <-tick.C:
			}
		}
		closed, err := s.runBatch(ctx, first, in, linger, acks)
		if err != nil {
			s.metrics.errors.Inc()
			return err // logged by the caller, which handles it
		}
		if closed {
			return nil
		}
		tick.Reset(s.cfg.Tick)
	}
}

// runBatch produces first and whatever else arrives within Linger and MaxBatchBytes, reports
// the acknowledged units on acks, produces the records of the reply and makes it all durable.
// With first nil it is a tick: only the reply's records are produced. It reports whether in
// was closed.
func (s *Sink) runBatch(ctx context.Context, first *change.Unit, in <-chan *change.Unit, linger *time.Timer, acks Acker) (closed bool, err error) {
	b := &batch{start: time.Now(), limit: s.cfg.MaxBatchBytes, prod: s.prod}
	if first != nil && largestRecord(first) > largeRecordBytes {
		b.prod, b.large = s.prodLarge, true
	}
	s.inFlight.Store(b.start.UnixNano())
	defer s.inFlight.Store(0)
	s.resetBatchErr()
	defer func() {
		if err != nil && b.txn {
			// A produce that failed with INVALID_PRODUCER_EPOCH only learns at the abort
			// whether another instance took over.
			if aerr := s.abort(ctx, b); errors.Is(aerr, kerr.ProducerFenced) && !errors.Is(err, ErrFenced) {
				err = &fencedError{id: s.cfg.TransactionalID, err: err}
			}
		}
	}()

	if first != nil {
		if err := s.begin(b); err != nil {
			return false, err
		}
		if err := s.produceUnit(ctx, b, first); err != nil {
			return false, err
		}
		if closed, err = s.collect(ctx, b, in, linger); err != nil {
			return closed, err
		}
		if s.cfg.Delivery == ExactlyOnce {
			recs, err := acks.Produced(ctx, b.units)
			if err != nil {
				return closed, err
			}
			if err := s.produceRecords(ctx, b, recs); err != nil {
				return closed, err
			}
		}
		if err := s.flush(ctx, b); err != nil {
			return closed, err
		}
		// The units are durable: their share of their stage's budget goes back.
		for _, u := range b.units {
			u.Claim.Return()
		}
	}

	recs, err := acks.Durable(ctx, b.units, s.offsets.snapshot())
	if err != nil {
		return closed, err
	}
	if len(recs) > 0 {
		if err := s.begin(b); err != nil {
			return closed, err
		}
		if err := s.produceRecords(ctx, b, recs); err != nil {
			return closed, err
		}
		if err := s.flush(ctx, b); err != nil {
			return closed, err
		}
	}
	if b.txn {
		if err := b.prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return closed, fmt.Errorf("commit kafka transaction: %w", s.classify(err))
		}
		b.txn = false
		if !b.large {
			s.committed(ctx)
		}
	}
	// Every record of the batch was flushed: their promises ran, and the slabs can be reused.
	s.recycleSlabs()
	if err := acks.Committed(ctx); err != nil {
		return closed, err
	}

	if len(b.units) > 0 || b.records > 0 {
		elapsed := time.Since(b.start)
		s.metrics.records.Add(float64(b.records))
		s.metrics.bytes.Add(float64(b.recBytes))
		s.metrics.batches.Inc()
		s.metrics.batchDuration.Observe(elapsed.Seconds())
		s.log.Debug("batch durable", "units", len(b.units), "records", b.records, "bytes", b.recBytes, "duration", elapsed)
	}
	return closed, nil
}

// collect adds units to b until Linger passes, b holds its limit, or in is closed.
func (s *Sink) collect(ctx context.Context, b *batch, in <-chan *change.Unit, linger *time.Timer) (closed bool, err error) {
	linger.Reset(s.cfg.Linger)
	defer linger.Stop()
	for b.bytes < b.limit {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-linger.C:
			return false, nil
		case u, ok := <-in:
			if !ok {
				return true, nil
			}
			if u == nil {
				continue
			}
			if u.Piece != nil && u.Piece.Index == 0 {
				// A transaction published in pieces starts a batch of its own: the batches
				// before it stay free of its records, so their watermarks can be written.
				s.next = u
				return false, nil
			}
			if !b.large && largestRecord(u) > largeRecordBytes {
				// A record the main producer cannot take: the large producer takes the
				// unit in a batch (a transaction) of its own.
				s.next = u
				return false, nil
			}
			if err := s.produceUnit(ctx, b, u); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// begin opens a transaction for b in exactly-once mode, unless one is open.
func (s *Sink) begin(b *batch) error {
	if s.cfg.Delivery != ExactlyOnce || b.txn {
		return nil
	}
	if err := b.prod.BeginTransaction(); err != nil {
		return fmt.Errorf("begin kafka transaction: %w", s.classify(err))
	}
	b.txn = true
	return nil
}

// flush waits until every produced record is acknowledged, then reports the batch's first
// produce error.
func (s *Sink) flush(ctx context.Context, b *batch) error {
	if err := b.prod.Flush(ctx); err != nil {
		return fmt.Errorf("flush records to kafka: %w", err)
	}
	if err := s.takeBatchErr(); err != nil {
		return fmt.Errorf("produce to kafka: %w", s.classify(err))
	}
	return nil
}

// abort drops buffered records and aborts the open transaction, with a fresh deadline so
// that a cancelled ctx still ends the transaction cleanly. A failure is logged and returned
// for classification only: the broker aborts the transaction at its timeout, and the next
// instance fences it anyway.
func (s *Sink) abort(ctx context.Context, b *batch) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s.metrics.aborts.Inc()
	err := b.prod.AbortBufferedRecords(actx)
	if err == nil {
		err = b.prod.EndTransaction(actx, kgo.TryAbort)
	}
	if err != nil && !errors.Is(err, kerr.ProducerFenced) {
		s.log.Warn("abort kafka transaction", "error", err)
	}
	return err
}

// largestRecord returns the size (change.Record.Size) of u's largest record.
func largestRecord(u *change.Unit) int {
	n := 0
	for i := range u.Records {
		n = max(n, u.Records[i].Size())
	}
	return n
}

func (s *Sink) produceUnit(ctx context.Context, b *batch, u *change.Unit) error {
	b.units = append(b.units, u)
	b.bytes += u.Bytes()
	b.ts = time.Now()
	if u.Kind == change.KindSnapshot || u.Kind == change.KindChunk {
		b.limit = min(b.limit, s.cfg.MaxBulkBatchBytes)
	}
	for i := range u.Records {
		if err := s.produceRecord(ctx, b, &u.Records[i]); err != nil {
			return fmt.Errorf("%s unit ending at %s: %w", u.Kind, u.End, err)
		}
	}
	return nil
}

// produceRecords produces the owner's records (checkpoints, watermarks) in b's transaction.
func (s *Sink) produceRecords(ctx context.Context, b *batch, recs []change.Record) error {
	b.ts = time.Now()
	for i := range recs {
		if err := s.produceRecord(ctx, b, &recs[i]); err != nil {
			return err
		}
	}
	return nil
}

// produceRecord hands r to the producer asynchronously; its outcome reaches onProduced.
// Produce blocks while the client buffers its maximum, which is the sink's backpressure.
func (s *Sink) produceRecord(ctx context.Context, b *batch, r *change.Record) error {
	switch {
	case r.Partition == change.AllPartitions:
		n, err := s.partitionCount(ctx, r.Topic)
		if err != nil {
			return err
		}
		for p := range n {
			s.produce(ctx, b, r, p)
		}
	case r.Partition == change.AnyPartition || r.Partition >= 0:
		s.produce(ctx, b, r, r.Partition)
	default:
		return fmt.Errorf("record for topic %s has invalid partition %d", r.Topic, r.Partition)
	}
	return nil
}

func (s *Sink) produce(ctx context.Context, b *batch, r *change.Record, partition int32) {
	sr := s.newRecord()
	kr := &sr.rec
	kr.Topic, kr.Key, kr.Value, kr.Partition, kr.Timestamp = r.Topic, r.Key, r.Value, partition, b.ts
	if partition >= 0 {
		kr.Context = s.part.explicit
	}
	if len(r.Headers) > 0 {
		if len(r.Headers) <= len(sr.hdrs) {
			kr.Headers = sr.hdrs[:len(r.Headers):len(r.Headers)]
		} else {
			kr.Headers = make([]kgo.RecordHeader, len(r.Headers))
		}
		for i, h := range r.Headers {
			kr.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	b.records++
	b.recBytes += r.Size()
	b.prod.Produce(ctx, kr, s.promise)
}

// onProduced is the promise of every record. It only records: the offset of a success, the
// first error of the batch.
func (s *Sink) onProduced(r *kgo.Record, err error) {
	if err != nil {
		s.errMu.Lock()
		if s.batchErr == nil {
			s.batchErr = fmt.Errorf("topic %s partition %d: %w", r.Topic, r.Partition, err)
		}
		s.errMu.Unlock()
		return
	}
	s.offsets.advance(r.Topic, r.Partition, r.Offset)
}

func (s *Sink) resetBatchErr() {
	s.errMu.Lock()
	s.batchErr = nil
	s.errMu.Unlock()
}

func (s *Sink) takeBatchErr() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	err := s.batchErr
	s.batchErr = nil
	return err
}

// Waiting returns how long the batch in flight has waited to be durable (0 between batches): a
// batch takes milliseconds while Kafka answers, so a long wait is Kafka not taking the records
// (brokers unreachable, fewer in-sync replicas than min.insync.replicas). Safe from any goroutine.
func (s *Sink) Waiting() time.Duration {
	at := s.inFlight.Load()
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at))
}
