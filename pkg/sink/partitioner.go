package sink

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partitioner is the producer's kgo.Partitioner. A record whose Context is the sink's
// explicit-partition marker keeps the Partition it was given (AllPartitions copies, explicit
// partitions); every other record goes through kgo's StickyKeyPartitioner with Kafka's own
// murmur2 hasher: a keyed record lands where the Java client's default partitioner puts it, a
// keyless one sticks to a partition until that partition's batch rolls over.
type partitioner struct {
	explicit context.Context // marker; compared by identity
	inner    kgo.Partitioner
}

// explicitKey makes the marker context distinct from any context a caller could pass.
type explicitKey struct{}

func newPartitioner() *partitioner {
	return &partitioner{
		explicit: context.WithValue(context.Background(), explicitKey{}, true),
		inner:    kgo.StickyKeyPartitioner(nil),
	}
}

// ForTopic returns the topic's partitioner. kgo's own (inner) is made on first need: it holds a
// random source of 5 KiB, 52 MiB for 10,000 topics of one partition, which never need it.
func (p *partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{explicit: p.explicit, outer: p.inner, topic: topic}
}

type topicPartitioner struct {
	explicit context.Context
	outer    kgo.Partitioner
	topic    string
	inner    kgo.TopicPartitioner // nil until needed
}

// sticky returns kgo's partitioner of the topic, made on first use.
func (t *topicPartitioner) sticky() kgo.TopicPartitioner {
	if t.inner == nil {
		t.inner = t.outer.ForTopic(t.topic)
	}
	return t.inner
}

func (t *topicPartitioner) isExplicit(r *kgo.Record) bool { return r.Context == t.explicit }

func (t *topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	// kgo's sticky key partitioner: a keyed record goes by its key.
	return t.isExplicit(r) || r.Key != nil
}

// Partition returns the record's own partition when it is explicit. An explicit partition
// outside [0, n) is returned as is, and kgo fails the record with an "invalid record
// partitioning choice" error rather than moving it silently.
func (t *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if t.isExplicit(r) {
		return int(r.Partition)
	}
	if n == 1 {
		return 0 // one partition: no choice to make, so no key hash (murmur2 was 6% of a snapshot's CPU)
	}
	return t.sticky().Partition(r, n)
}

func (t *topicPartitioner) OnNewBatch() {
	if t.inner == nil {
		return // no partition chosen by it yet: nothing to move on from
	}
	if nb, ok := t.inner.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}
