package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/kafkaconn"
)

// ErrFenced is matched (errors.Is) by the errors of a Sink that another instance with the same
// transactional id has fenced. It is permanent: this process must stop producing.
var ErrFenced = errors.New("producer fenced")

// producer is the part of *kgo.Client that Run uses; tests may swap it.
type producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
	BeginTransaction() error
	EndTransaction(ctx context.Context, commit kgo.TransactionEndTry) error
	AbortBufferedRecords(ctx context.Context) error
}

// Sink produces units to Kafka. Make one with New; it is used by one Run at a time. After Run
// returns an error, Close the Sink and make a new one.
type Sink struct {
	cfg    Config
	log    *slog.Logger
	client *kgo.Client
	prod   producer
	// large produces the batches that hold a record larger than the main producer's batch
	// limit (largeRecordBytes), with record batches of up to MaxRecordBytes, under its own
	// transactional id (TransactionalID + LargeTransactionalIDSuffix). A batch, and so a
	// transaction, uses one producer from its start to its commit.
	large     *kgo.Client
	prodLarge producer
	admin     *kadm.Client
	part      *partitioner
	offsets   *offsetTracker
	metrics   *metrics

	mu         sync.Mutex
	closeOnce  sync.Once
	partitions map[string]int32 // real partition counts of known topics
	// fresh: topics EnsureTopics created whose leaders AwaitLeaders has not seen answer yet.
	fresh map[string]bool
	// inFlight is when the batch in flight began (unix nanoseconds; 0 between batches).
	inFlight atomic.Int64

	// errMu guards batchErr, the first produce error of the current batch.
	errMu    sync.Mutex
	batchErr error
	// promise is s.onProduced, bound once so that producing allocates no closure per record.
	promise func(*kgo.Record, error)
	// next is a unit Run took from its input that opens the next batch (the first piece of a
	// transaction handed over in pieces).
	next *change.Unit
	// slab hands out the kgo.Records (with room for their headers) that produce needs, so
	// that producing allocates nothing per record. Run's goroutine alone uses it. A slab is
	// reused only after a batch's records are all flushed (every promise has run, and
	// franz-go keeps no record after its promise), so a record stays untouched until Kafka
	// has it; see recycleSlabs.
	slab slabs
	// purge is what the sink knows of the topics the main producer may forget (purge.go);
	// Run's goroutine writes it under purgeMu, which tests take to read it.
	purgeMu sync.Mutex
	purge   purgeState
}

// slabSize is the records of one slab.
const slabSize = 256

// slabRecord is a record as franz-go takes it, with inline room for the headers the encoder
// writes (lsn, op, old and new key, unchanged, array dims).
type slabRecord struct {
	rec  kgo.Record
	hdrs [6]kgo.RecordHeader
}

// slabs are the slabs of records handed out since the last recycle (used; the last one is
// cur, of which next records are handed out) and those free for reuse.
type slabs struct {
	cur  *[slabSize]slabRecord
	next int
	used []*[slabSize]slabRecord
	free []*[slabSize]slabRecord
}

// minFreeSlabs is the fewest slabs kept for reuse (each about 115 KiB); beyond it, as many as
// the last batch used are kept, so that a batch of the same size allocates none.
const minFreeSlabs = 4

// newRecord returns a zeroed record from the slab.
func (s *Sink) newRecord() *slabRecord {
	sl := &s.slab
	if sl.cur == nil || sl.next == slabSize {
		if n := len(sl.free); n > 0 {
			sl.cur, sl.free = sl.free[n-1], sl.free[:n-1]
		} else {
			sl.cur = new([slabSize]slabRecord)
		}
		sl.used = append(sl.used, sl.cur)
		sl.next = 0
	}
	r := &sl.cur[sl.next]
	sl.next++
	*r = slabRecord{}
	return r
}

// recycleSlabs makes every slab handed out so far free for reuse, keeping as many as the batch
// used (at least minFreeSlabs): the next batch of that size takes all its records from them,
// and a smaller batch lets the surplus go. Call it only when every record produced from them
// has had its promise called (after a successful Flush): franz-go does not touch a record
// after its promise.
func (s *Sink) recycleSlabs() {
	sl := &s.slab
	keep := max(len(sl.used), minFreeSlabs)
	sl.free = append(sl.free, sl.used...)
	if len(sl.free) > keep {
		clear(sl.free[keep:])
		sl.free = sl.free[:keep]
	}
	clear(sl.used)
	sl.used, sl.cur, sl.next = sl.used[:0], nil, 0
}

// New validates cfg and builds the Kafka client. It does not connect; see Ping.
func New(cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("configure kafka sink: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("register sink metrics: %w", err)
	}
	s := &Sink{
		cfg:        cfg,
		log:        cfg.Logger.With("stage", "sink"),
		part:       newPartitioner(),
		offsets:    newOffsetTracker(),
		metrics:    m,
		partitions: make(map[string]int32),
		fresh:      make(map[string]bool),
	}
	s.promise = s.onProduced
	if _, err := cfg.Security.ClientOpts(); err != nil {
		return nil, fmt.Errorf("configure kafka sink: %w", err)
	}
	client, err := kafkaconn.NewClient(s.settings(""), s.producerOpts(producerBatchBytes, cfg.TransactionalID)...)
	if err != nil {
		return nil, fmt.Errorf("create kafka client: %w", err)
	}
	large, err := kafkaconn.NewClient(s.settings(LargeTransactionalIDSuffix), s.producerOpts(MaxRecordBytes, s.largeTxnID())...)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("create kafka client: %w", err)
	}
	s.client, s.large = client, large
	s.prod, s.prodLarge = client, large
	s.admin = kadm.NewClient(client)
	return s, nil
}

// largeTxnID is the large producer's transactional id ("" in at-least-once mode).
func (s *Sink) largeTxnID() string {
	if s.cfg.Delivery != ExactlyOnce {
		return ""
	}
	return s.cfg.TransactionalID + LargeTransactionalIDSuffix
}

// settings are how the sink's clients reach Kafka; suffix is added to the client id.
func (s *Sink) settings(suffix string) kafkaconn.Settings {
	return kafkaconn.Settings{Brokers: s.cfg.Brokers, Security: s.cfg.Security, ClientID: s.cfg.ClientID + suffix, DialTimeout: s.cfg.DialTimeout}
}

// producerOpts are the options of a producer with record batches of up to batchBytes and
// transactional id txnID (exactly-once mode), beside its settings.
func (s *Sink) producerOpts(batchBytes int32, txnID string) []kgo.Opt {
	maxBuffered := max(s.cfg.MaxBatchBytes, 2*MaxRecordBytes)
	codec, _ := compressionCodec(s.cfg.Compression) // validated by New
	opts := []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(s.part),
		kgo.ProducerBatchMaxBytes(batchBytes),
		kgo.ProducerLinger(producerLinger),
		kgo.ProducerBatchCompression(codec),
		kgo.MaxBufferedBytes(maxBuffered),
		kgo.WithLogger(kgoLogger{s.log}),
		// A produce to a partition the broker is not ready to lead yet (a topic created just
		// now) waits for a metadata refresh, at most one per MetadataMinAge (default 5 s), and
		// holds up its whole transaction: 1,000 new tables hydrated in 10.3-10.5 s with the
		// default, 7.0-8.3 s with this (docs/development/journal.md, "Many small tables").
		kgo.MetadataMinAge(metadataMinAge),
	}
	if s.cfg.Delivery == ExactlyOnce {
		opts = append(opts,
			kgo.TransactionalID(txnID),
			kgo.TransactionTimeout(s.cfg.TransactionTimeout),
			// A transaction begun right after the previous commit often finds the coordinator
			// still writing its markers (CONCURRENT_TRANSACTIONS); retry sooner than the
			// default 20ms, which is a large share of one batch while catching up.
			kgo.ConcurrentTransactionsBackoff(concurrentTxnBackoff),
		)
	}
	return opts
}

// Ping checks that a broker answers within the dial timeout: a broker that accepts connections
// and never answers is an error after it, as one that cannot be reached. The seed brokers are
// asked at once, so one that hangs does not hide the others.
func (s *Sink) Ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	seeds := s.client.SeedBrokers()
	errs := make(chan error, len(seeds))
	for _, b := range seeds {
		go func() {
			_, err := b.Request(pctx, kmsg.NewPtrMetadataRequest())
			errs <- err
		}()
	}
	var err error
	for range seeds {
		if err = <-errs; err == nil {
			return nil // the others end with pctx
		}
	}
	if explained := kafkaconn.ExplainConnect(s.cfg.Security, err); explained != err {
		return fmt.Errorf("cannot connect to Kafka at %s: %w", strings.Join(s.cfg.Brokers, ","), explained)
	}
	if ne, ok := errors.AsType[net.Error](err); ctx.Err() == nil && (pctx.Err() != nil || ok && ne.Timeout()) {
		return fmt.Errorf("cannot reach Kafka at %s: no answer within the connect timeout of %s (%w); check CDC_KAFKA_BROKERS and that the brokers are running and reachable",
			strings.Join(s.cfg.Brokers, ","), s.cfg.DialTimeout, err)
	}
	return fmt.Errorf("cannot reach Kafka at %s: %w; check CDC_KAFKA_BROKERS", strings.Join(s.cfg.Brokers, ","), err)
}

// Init initialises both producers: it loads their producer ids, which in exactly-once mode
// fences any previous instance with the same transactional ids and completes or aborts its
// last transactions. ReadWatermarks calls it; calling it again is cheap.
func (s *Sink) Init(ctx context.Context) error {
	if _, _, err := s.client.ProducerID(ctx); err != nil {
		return s.classify(fmt.Errorf("initialise kafka producer: %w", err))
	}
	if _, _, err := s.large.ProducerID(ctx); err != nil {
		return s.classify(fmt.Errorf("initialise kafka producer for large records: %w", err))
	}
	return nil
}

// Delivery returns the sink's delivery guarantee (Config.Delivery, defaulted).
func (s *Sink) Delivery() Delivery { return s.cfg.Delivery }

// Partitions returns the partition count of a topic EnsureTopics saw or Run looked up, or 0.
func (s *Sink) Partitions(topic string) int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.partitions[topic]
}

// EndOffsets returns a copy of the next offsets known for topic: the end offsets seeded by
// EnsureTopics, raised by every acknowledged record.
func (s *Sink) EndOffsets(topic string) map[int32]int64 {
	return s.offsets.topic(topic)
}

// Close closes the client; calls after the first do nothing. In exactly-once mode an open
// transaction is left for the broker to abort (or for the next instance to fence).
func (s *Sink) Close() {
	s.closeOnce.Do(func() {
		s.client.Close()
		s.large.Close()
	})
}

// partitionCount returns topic's partition count, asking the cluster when it is not known yet.
func (s *Sink) partitionCount(ctx context.Context, topic string) (int32, error) {
	if n := s.Partitions(topic); n > 0 {
		return n, nil
	}
	metas, err := s.describeTopics(ctx, []string{topic})
	if err != nil {
		return 0, err
	}
	m := metas[topic]
	if m.err != nil {
		return 0, fmt.Errorf("describe topic %s: %w", topic, m.err)
	}
	n := m.partitions
	s.setPartitions(topic, n)
	return n, nil
}

func (s *Sink) setPartitions(topic string, n int32) {
	s.mu.Lock()
	s.partitions[topic] = n
	s.mu.Unlock()
}

// fencedError says that another instance took over the transactional id.
type fencedError struct {
	id  string
	err error
}

func (e *fencedError) Error() string {
	return fmt.Sprintf("another instance with transactional id %q took over: %v", e.id, e.err)
}

func (e *fencedError) Unwrap() []error { return []error{ErrFenced, e.err} }

// classify turns a fencing error into a fencedError; other errors are returned as they are.
func (s *Sink) classify(err error) error {
	if err == nil || s.cfg.Delivery != ExactlyOnce {
		return err
	}
	if errors.Is(err, kerr.ProducerFenced) {
		return &fencedError{id: s.cfg.TransactionalID, err: err}
	}
	return err
}
