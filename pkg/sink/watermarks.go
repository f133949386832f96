package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/kafkaconn"
)

// ReadWatermarks reads the watermark topic read-committed, from its start to its last stable
// offsets as of the call, and hands fn every record value in offset order per partition
// (partition by partition when the topic has several), tombstones skipped. It keeps nothing
// itself: the caller folds the values as they come (watermark.TopicReader keeps each export's
// latest), so memory does not follow the topic's history. A record larger than MaxRecordBytes,
// or one fn refuses, stops the read with a *RecordError naming it. A missing topic reads as
// empty; nothing is created. In exactly-once mode it first initialises the producer (Init), so
// that a previous instance's open transaction is resolved before reading.
func (s *Sink) ReadWatermarks(ctx context.Context, fn func(partition int32, value []byte) error) error {
	if s.cfg.Delivery == ExactlyOnce {
		if err := s.Init(ctx); err != nil {
			return err
		}
	}
	return s.ScanTopic(ctx, s.cfg.WatermarkTopic, nil, nil, func(r *kgo.Record) error {
		if r.Value == nil {
			return nil
		}
		return fn(r.Partition, r.Value)
	})
}

// RecordError is a record read back from Kafka that was refused: larger than MaxRecordBytes,
// the largest record the sink writes, or refused by the caller's function (a watermark record
// that does not decode). The read stops at it.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record at %s partition %d offset %d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// errRecordTooLarge is wrapped by the RecordError of a record larger than MaxRecordBytes.
var errRecordTooLarge = errors.New("record too large")

// readBatchBytes bounds what one fetched record batch may decompress to when reading topics
// back. The producer builds batches of at most MaxRecordBytes uncompressed; franz-go's default
// would let a small compressed batch expand to 1 GiB.
const readBatchBytes = 4 * MaxRecordBytes

// recordBytes is the size of r's key, value and headers.
func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// ScanTopic reads topic read-committed from the given offsets (a partition not listed, or
// listed below the log start, is read from its start) up to its last stable offsets as of the
// call, and calls fn for every data record in offset order per partition. A missing topic reads
// as empty. A record larger than MaxRecordBytes (which the sink never writes), or one for which
// fn returns an error, stops the scan with a *RecordError. The client bounds what it reads from
// the broker (franz-go's 100 MiB per response) and what a batch may decompress to
// (readBatchBytes).
//
// atLeast, when set, are offsets per partition that committed records reach (the sink's own
// EndOffsets after a commit): the scan first waits until the last stable offsets pass them.
// Kafka writes a transaction's commit markers after EndTxn returns, so right after a commit the
// last stable offset can still stand before that transaction's records.
func (s *Sink) ScanTopic(ctx context.Context, topic string, from, atLeast map[int32]int64, fn func(*kgo.Record) error) error {
	metas, err := s.describeTopics(ctx, []string{topic})
	if err != nil {
		return err
	}
	if errors.Is(metas[topic].err, kerr.UnknownTopicOrPartition) {
		return nil
	}
	ends, err := s.stableOffsets(ctx, topic, atLeast)
	if err != nil {
		return err
	}
	starts, err := s.admin.ListStartOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	// want: partition -> last offset to reach (end - 1), for partitions with anything to read.
	want := make(map[int32]int64)
	offsets := make(map[int32]kgo.Offset)
	for p, end := range ends[topic] {
		if errors.Is(end.Err, kerr.UnknownTopicOrPartition) {
			return nil
		}
		if end.Err != nil {
			return fmt.Errorf("list end offsets of %s partition %d: %w", topic, p, end.Err)
		}
		start, ok := starts.Lookup(topic, p)
		if !ok || start.Err != nil {
			return fmt.Errorf("list start offsets of %s partition %d: %w", topic, p, orDefault(start.Err, kerr.UnknownTopicOrPartition))
		}
		begin := max(start.Offset, from[p])
		if end.Offset > begin {
			want[p] = end.Offset - 1
			offsets[p] = kgo.NewOffset().At(begin)
		}
	}
	if len(want) == 0 {
		return nil
	}

	cl, err := kafkaconn.NewClient(s.settings("-reader"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Commit and abort markers come back too, so that reaching the end offset is seen even
		// when the last thing in a partition is a marker.
		kgo.KeepControlRecords(),
		kgo.MaxDecompressBatchBytes(readBatchBytes),
		kgo.WithLogger(kgoLogger{s.log}),
	)
	if err != nil {
		return fmt.Errorf("create reader of %s: %w", topic, err)
	}
	defer cl.Close()

	for len(want) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		var errs []error
		fetches.EachError(func(t string, p int32, err error) {
			errs = append(errs, fmt.Errorf("read %s partition %d: %w", t, p, err))
		})
		if err := errors.Join(errs...); err != nil {
			return err
		}
		var refused error
		fetches.EachRecord(func(r *kgo.Record) {
			last, ok := want[r.Partition]
			if !ok || refused != nil {
				return
			}
			if r.Offset <= last && !r.Attrs.IsControl() {
				if n := recordBytes(r); n > MaxRecordBytes {
					refused = &RecordError{Topic: topic, Partition: r.Partition, Offset: r.Offset,
						Err: fmt.Errorf("%w: %d bytes, more than %d, the largest the sink writes", errRecordTooLarge, n, MaxRecordBytes)}
					return
				}
				if err := fn(r); err != nil {
					refused = &RecordError{Topic: topic, Partition: r.Partition, Offset: r.Offset, Err: err}
					return
				}
			}
			if r.Offset >= last {
				delete(want, r.Partition)
			}
		})
		if refused != nil {
			return refused
		}
	}
	return nil
}

// stableOffsets lists topic's last stable offsets, waiting until every partition's is past
// atLeast's.
func (s *Sink) stableOffsets(ctx context.Context, topic string, atLeast map[int32]int64) (kadm.ListedOffsets, error) {
	for {
		ends, err := s.admin.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
		}
		behind := false
		for p, want := range atLeast {
			if o, ok := ends.Lookup(topic, p); ok && o.Err == nil && o.Offset < want {
				behind = true
			}
		}
		if !behind {
			return ends, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the commit of %s to become readable: %w", topic, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// orDefault returns err, or def when err is nil.
func orDefault(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// ScanKeys reads topic as ScanTopic does, from from to atLeast, and folds its keyed records at
// the cut (per partition, the offset where the records after it begin): before the cut a record
// with a value makes its key alive, a tombstone kills it and a keyless record carrying the
// header truncate kills every key; after the cut every key with a value counts.
func (s *Sink) ScanKeys(ctx context.Context, topic string, from, cut, atLeast map[int32]int64, truncate change.Header) (change.TopicKeys, error) {
	k := change.TopicKeys{Before: make(map[string]struct{}), After: make(map[string]struct{})}
	err := s.ScanTopic(ctx, topic, from, atLeast, func(r *kgo.Record) error {
		if r.Offset >= cut[r.Partition] {
			if r.Key != nil && r.Value != nil {
				k.After[string(r.Key)] = struct{}{}
			}
			return nil
		}
		switch {
		case r.Key == nil && hasHeader(r, truncate):
			clear(k.Before)
		case r.Key == nil:
		case r.Value == nil:
			delete(k.Before, string(r.Key))
		default:
			k.Before[string(r.Key)] = struct{}{}
		}
		return nil
	})
	return k, err
}

// hasHeader reports whether r's first header named h.Key has the value h.Value.
func hasHeader(r *kgo.Record, h change.Header) bool {
	for _, rh := range r.Headers {
		if rh.Key == h.Key {
			return string(rh.Value) == string(h.Value)
		}
	}
	return false
}
