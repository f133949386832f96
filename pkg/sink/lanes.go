package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// In exactly-once mode the sink has two transactional producers ("lanes") and takes them in
// turn, one batch each, so that the broker's commit of one batch overlaps the next batch's
// produce on the other lane. Run keeps these rules, which make the Kafka transactions look to
// every reader as if one producer had written them one after the other:
//
//   - A batch starts producing only once every record of the batch before it is acknowledged,
//     except the records of that batch's AckDurable reply when they all go to the watermark
//     topic: those are flushed with its commit, in the background. So in every data topic's
//     partition a batch's records lie after the earlier batch's, and per-key order and the
//     offsets that the earlier batch's watermark records name hold.
//   - A batch's AckProduced, AckDurable and its own commit wait until the earlier batch has
//     committed and its AckCommitted was sent (Run and collect send it as soon as the commit
//     is done). So the owner sees the acks in the same order as with one producer (Produced,
//     Durable, Committed, Produced, ...); the records of a batch's replies, the only ones that
//     go to the watermark topic, land there after the earlier batch's; and the committed
//     transactions are always a prefix of the batches: a crash leaves at most the last
//     batch's transaction open (the earlier one committed or not), and the next instance
//     aborts it.
//   - The next instance fences both lanes: Init initialises both transactional ids, the
//     instance's own (Config.TransactionalID) and that id with secondLaneSuffix.
//
// In at-least-once mode there is one lane and nothing overlaps.

// secondLaneSuffix makes the second lane's transactional id from the instance's. The id is
// "tidemark-<database>-<slot>" and a slot name has no '.', so no other instance's id (nor its
// second lane's) can be this one.
const secondLaneSuffix = ".2"

// lane is one producer of the sink. errMu guards err, the first produce error of the lane's
// current batch.
type lane struct {
	prod producer
	// id is the lane's transactional id (exactly-once), for the fenced error.
	id string
	// promise is onProduced bound once, so that producing allocates no closure per record.
	promise func(*kgo.Record, error)
	offsets *offsetTracker

	errMu sync.Mutex
	err   error
}

func newLane(prod producer, id string, offsets *offsetTracker) *lane {
	l := &lane{prod: prod, id: id, offsets: offsets}
	l.promise = l.onProduced
	return l
}

// onProduced is the promise of every record. It only records: the offset of a success, the
// first error of the batch.
func (l *lane) onProduced(r *kgo.Record, err error) {
	if err != nil {
		l.errMu.Lock()
		if l.err == nil {
			l.err = fmt.Errorf("topic %s partition %d: %w", r.Topic, r.Partition, err)
		}
		l.errMu.Unlock()
		return
	}
	l.offsets.advance(r.Topic, r.Partition, r.Offset)
}

func (l *lane) resetErr() {
	l.errMu.Lock()
	l.err = nil
	l.errMu.Unlock()
}

func (l *lane) takeErr() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	err := l.err
	l.err = nil
	return err
}

// commit is a batch whose transaction is being committed in the background.
type commit struct {
	b    *batch
	done chan error // capacity 1: the commit's outcome
}

// startCommit flushes what b produced since its last flush and commits its transaction in a
// goroutine, so that the next batch can produce on the other lane meanwhile. settle (or
// dropCommit, when Run fails) takes the outcome.
func (s *Sink) startCommit(ctx context.Context, b *batch) {
	c := &commit{b: b, done: make(chan error, 1)}
	s.commit = c
	go func() {
		var err error
		if b.unflushed {
			err = s.flush(ctx, b)
		}
		if err == nil {
			if err = b.lane.prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
				err = fmt.Errorf("commit kafka transaction: %w", s.classify(b.lane, err))
			} else {
				b.txn = false
			}
		}
		c.done <- err
	}()
}

// settle waits for the commit in flight, if any, and reports it (committed).
func (s *Sink) settle(ctx context.Context, acks chan<- Ack) error {
	c := s.commit
	if c == nil {
		return nil
	}
	select {
	case err := <-c.done:
		return s.committed(ctx, acks, err)
	case <-ctx.Done():
		return ctx.Err() // dropCommit waits for it
	}
}

// commitDone is the channel of the commit in flight, nil when there is none: Run and collect
// select on it, so that a commit is reported as soon as it is done.
func (s *Sink) commitDone() <-chan error {
	if s.commit == nil {
		return nil
	}
	return s.commit.done
}

// committed takes err, the outcome of the commit in flight read from its channel, and reports
// it with AckCommitted. A failed commit aborts its transaction and is returned.
func (s *Sink) committed(ctx context.Context, acks chan<- Ack, err error) error {
	c := s.commit
	s.commit = nil
	if err != nil {
		return s.abortBatch(ctx, c.b, err)
	}
	select {
	case acks <- Ack{Kind: AckCommitted}:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.observe(c.b)
	return nil
}

// dropCommit waits for the commit in flight, if any, when Run ends with an error: Run's
// goroutines end with it. A commit that failed is aborted; one that succeeded is not
// reported (the next life reads it back from the watermark topic).
func (s *Sink) dropCommit(ctx context.Context) {
	c := s.commit
	if c == nil {
		return
	}
	s.commit = nil
	if err := <-c.done; err != nil {
		_ = s.abortBatch(ctx, c.b, err)
	}
}

// abortBatch aborts b's open transaction after err and returns err, as a fenced error when the
// abort tells that another instance took over the lane.
func (s *Sink) abortBatch(ctx context.Context, b *batch, err error) error {
	if !b.txn {
		return err
	}
	b.txn = false
	// A produce that failed with INVALID_PRODUCER_EPOCH only learns at the abort whether
	// another instance took over.
	if aerr := s.abort(ctx, b.lane); errors.Is(aerr, kerr.ProducerFenced) && !errors.Is(err, ErrFenced) {
		err = &fencedError{id: b.lane.id, err: err}
	}
	return err
}
