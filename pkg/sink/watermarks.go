package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadWatermarks reads the watermark topic read-committed, from its start to its last stable
// offsets as of the call, and returns the record values in offset order (partition by
// partition when the topic has several). Tombstones are skipped. A missing topic reads as
// empty; nothing is created. In exactly-once mode it first initialises the producer (Init),
// so that a previous instance's open transaction is resolved before reading.
func (s *Sink) ReadWatermarks(ctx context.Context) ([][]byte, error) {
	if s.cfg.Delivery == ExactlyOnce {
		if err := s.Init(ctx); err != nil {
			return nil, err
		}
	}
	values := make(map[int32][][]byte)
	err := s.ScanTopic(ctx, s.cfg.WatermarkTopic, nil, nil, func(r *kgo.Record) {
		if r.Value != nil {
			values[r.Partition] = append(values[r.Partition], r.Value)
		}
	})
	if err != nil {
		return nil, err
	}
	parts := make([]int32, 0, len(values))
	for p := range values {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	var out [][]byte
	for _, p := range parts {
		out = append(out, values[p]...)
	}
	return out, nil
}

// ScanTopic reads topic read-committed from the given offsets (a partition not listed, or
// listed below the log start, is read from its start) up to its last stable offsets as of the
// call, and calls fn for every data record in offset order per partition. A missing topic reads
// as empty.
//
// atLeast, when set, are offsets per partition that committed records reach (the sink's own
// EndOffsets after a commit): the scan first waits until the last stable offsets pass them.
// Kafka writes a transaction's commit markers after EndTxn returns, so right after a commit the
// last stable offset can still stand before that transaction's records.
func (s *Sink) ScanTopic(ctx context.Context, topic string, from, atLeast map[int32]int64, fn func(*kgo.Record)) error {
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

	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.DialTimeout(s.cfg.DialTimeout),
		kgo.ClientID(s.cfg.ClientID + "-reader"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Commit and abort markers come back too, so that reaching the end offset is seen even
		// when the last thing in a partition is a marker.
		kgo.KeepControlRecords(),
		kgo.WithLogger(kgoLogger{s.log}),
	}, s.security...)...)
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
		fetches.EachRecord(func(r *kgo.Record) {
			last, ok := want[r.Partition]
			if !ok {
				return
			}
			if r.Offset <= last && !r.Attrs.IsControl() {
				fn(r)
			}
			if r.Offset >= last {
				delete(want, r.Partition)
			}
		})
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
