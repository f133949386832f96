package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Producer settings of pkg/sink (sink.producerOpts, its main producer): the WRITE limit uses the same.
const (
	sinkBatchMaxBytes     = 1 << 20
	sinkLinger            = 5 * time.Millisecond
	sinkMaxBufferedBytes  = 16 << 20 // max(DefaultMaxBatchBytes, 4*batch max bytes)
	sinkTransactionTimout = 60 * time.Second
)

// benchCodecs are kgo's codecs by CDC_KAFKA_COMPRESSION name (sink.Compressions).
var benchCodecs = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

// kafkaClient is an admin-capable client for the bench's own look-ups.
type kafkaClient struct {
	brokers []string
	cl      *kgo.Client
	adm     *kadm.Client
	// codec is the batch codec of the WRITE limits' producers: cdc's (-codec, or its default).
	codec string
}

func newKafkaClient(brokers []string, codec string) (*kafkaClient, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &kafkaClient{brokers: brokers, cl: cl, adm: kadm.NewClient(cl), codec: codec}, nil
}

func (k *kafkaClient) close() { k.cl.Close() }

// endOffsets returns the end offset of every partition of the topics.
func (k *kafkaClient) endOffsets(ctx context.Context, topics ...string) (map[string]map[int32]int64, error) {
	ends, err := k.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %v: %w", topics, err)
	}
	out := make(map[string]map[int32]int64)
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("end offset of %s[%d]: %w", o.Topic, o.Partition, o.Err))
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = make(map[int32]int64)
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out, errors.Join(errs...)
}

// cleanupPolicy returns a topic's cleanup.policy.
func (k *kafkaClient) cleanupPolicy(ctx context.Context, topic string) (string, error) {
	rcs, err := k.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", topic, err)
	}
	if rc.Err != nil {
		return "", fmt.Errorf("describe %s: %w", topic, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			return *c.Value, nil
		}
	}
	return "delete", nil
}

// sampleRecord is a record read back from cdc's topics, reused as a WRITE limit payload.
type sampleRecord struct {
	topic   string
	key     []byte
	value   []byte
	headers []kgo.RecordHeader
}

// topicStats is what cdc wrote to a set of topics between two offsets.
type topicStats struct {
	Records      int64            `json:"records"`
	KeyBytes     int64            `json:"key_bytes"`
	ValueBytes   int64            `json:"value_bytes"`
	HeaderBytes  int64            `json:"header_bytes"`
	Offsets      int64            `json:"offsets"`
	Transactions int64            `json:"transactions"` // commit markers in the busiest partition
	PerTopic     map[string]int64 `json:"records_per_topic"`

	samples []sampleRecord
}

// bytes is the figure the MB/s columns use: keys plus values.
func (s topicStats) bytes() int64 { return s.KeyBytes + s.ValueBytes }

// recordsPerTxn is the average records per Kafka transaction (0 when unknown).
func (s topicStats) recordsPerTxn() float64 {
	if s.Transactions == 0 {
		return 0
	}
	return float64(s.Records) / float64(s.Transactions)
}

// readBack reads every committed record of topics from the start offsets (nil: from the
// beginning) to their current end offsets, counting records and bytes and keeping up to
// sampleCap records spread over the whole range. Offsets that hold no record are transaction
// markers (cdc never aborts on a clean run): their count in the busiest partition is the
// number of Kafka transactions that wrote to it.
func (k *kafkaClient) readBack(ctx context.Context, topics []string, start map[string]map[int32]int64, sampleCap int) (topicStats, error) {
	end, err := k.endOffsets(ctx, topics...)
	if err != nil {
		return topicStats{}, err
	}
	r := newReading(start, end, sampleCap)
	if len(r.remaining) == 0 {
		return r.st, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumePartitions(r.from),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		return r.st, fmt.Errorf("kafka consumer: %w", err)
	}
	defer cl.Close()
	for len(r.remaining) > 0 {
		pctx, cancel := context.WithTimeout(ctx, r.pollTimeout())
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return r.st, fmt.Errorf("read back %v: %w", topics, ctx.Err())
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
				ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return r.st, ferr
		}
		got := 0
		fs.EachRecord(func(rec *kgo.Record) {
			got++
			r.add(rec)
		})
		if got == 0 {
			// Nothing more: what is left are markers or aborted records.
			break
		}
	}
	r.countTransactions()
	return r.st, nil
}

// reading is the state of one readBack: what is left to read and what was counted.
type reading struct {
	st        topicStats
	start     map[string]map[int32]int64
	end       map[string]map[int32]int64
	from      map[string]map[int32]kgo.Offset
	remaining map[string]map[int32]int64 // partitions still to read, with their end
	perPart   map[string]map[int32]int64 // records read
	last      map[string]map[int32]int64 // offset of the last record read
	step      int64                      // every step-th record is a sample
	n         int64
	sampleCap int
}

func newReading(start, end map[string]map[int32]int64, sampleCap int) *reading {
	r := &reading{st: topicStats{PerTopic: make(map[string]int64)}, start: start, end: end,
		from: make(map[string]map[int32]kgo.Offset), remaining: make(map[string]map[int32]int64),
		perPart: make(map[string]map[int32]int64), last: make(map[string]map[int32]int64), sampleCap: sampleCap}
	for t, ps := range end {
		for p, e := range ps {
			from := start[t][p]
			r.st.Offsets += e - from
			if e <= from {
				continue
			}
			if r.from[t] == nil {
				r.from[t] = make(map[int32]kgo.Offset)
				r.remaining[t] = make(map[int32]int64)
			}
			r.from[t][p] = kgo.NewOffset().At(from)
			r.remaining[t][p] = e
		}
	}
	// Sample every step-th record so the samples span the range.
	r.step = max(int64(1), r.st.Offsets/int64(max(1, sampleCap)))
	return r
}

// pollTimeout is how long to wait for the next fetch. A transactional partition ends on a
// commit marker, which is never returned: once every partition left has reached its last
// possible record, wait only briefly.
func (r *reading) pollTimeout() time.Duration {
	for t, ps := range r.remaining {
		for p, e := range ps {
			if l, ok := r.last[t][p]; !ok || l+2 < e {
				return 5 * time.Second
			}
		}
	}
	return 500 * time.Millisecond
}

// add counts one record.
func (r *reading) add(rec *kgo.Record) {
	st := &r.st
	st.Records++
	st.KeyBytes += int64(len(rec.Key))
	st.ValueBytes += int64(len(rec.Value))
	for _, h := range rec.Headers {
		st.HeaderBytes += int64(len(h.Key) + len(h.Value))
	}
	st.PerTopic[rec.Topic]++
	if r.perPart[rec.Topic] == nil {
		r.perPart[rec.Topic] = make(map[int32]int64)
		r.last[rec.Topic] = make(map[int32]int64)
	}
	r.perPart[rec.Topic][rec.Partition]++
	if r.n%r.step == 0 && len(st.samples) < r.sampleCap {
		st.samples = append(st.samples, sampleRecord{topic: rec.Topic, key: rec.Key, value: rec.Value, headers: rec.Headers})
	}
	r.n++
	r.last[rec.Topic][rec.Partition] = rec.Offset
	if e, ok := r.remaining[rec.Topic][rec.Partition]; ok && rec.Offset+1 >= e {
		delete(r.remaining[rec.Topic], rec.Partition)
		if len(r.remaining[rec.Topic]) == 0 {
			delete(r.remaining, rec.Topic)
		}
	}
}

// countTransactions sets Transactions: the offsets without a record in the busiest partition.
func (r *reading) countTransactions() {
	for t, ps := range r.end {
		for p, e := range ps {
			markers := e - r.start[t][p] - r.perPart[t][p]
			r.st.Transactions = max(r.st.Transactions, markers)
		}
	}
}

// writeResult is one WRITE limit run.
type writeResult struct {
	Records      int64   `json:"records"`
	Bytes        int64   `json:"bytes"`
	Seconds      float64 `json:"seconds"`
	Transactions int64   `json:"transactions"`
	PerTxn       int     `json:"records_per_transaction"`
	Mode         string  `json:"mode"`
}

// writeLimit produces n records cycling through samples, pre-encoded in memory, with the
// producer settings of pkg/sink, into a fresh topic per sample topic (dest maps them), in
// transactions of perTxn records (transactional) or with the idempotent producer only.
func writeLimit(ctx context.Context, k *kafkaClient, samples []sampleRecord, dest map[string]string, policy map[string]string, n int64, perTxn int, transactional bool) (writeResult, error) {
	return writeLimitWith(ctx, k, samples, dest, policy, n, perTxn, transactional, false)
}

// writeLimitWith is writeLimit; tuned replaces the sink's batching with larger batches and a
// longer linger (producerTuned).
func writeLimitWith(ctx context.Context, k *kafkaClient, samples []sampleRecord, dest map[string]string, policy map[string]string, n int64, perTxn int, transactional, tuned bool) (writeResult, error) {
	if len(samples) == 0 {
		return writeResult{}, errors.New("write limit: no sample records")
	}
	if err := k.createDest(ctx, dest, policy); err != nil {
		return writeResult{}, err
	}
	opts, mode := producerOpts(k.brokers, k.codec, perTxn, transactional, tuned)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return writeResult{}, fmt.Errorf("kafka producer: %w", err)
	}
	defer cl.Close()
	// Load the producer id (and fence nothing) before the clock starts, as cdc does at start-up.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return writeResult{}, fmt.Errorf("initialise producer: %w", err)
	}
	return produceSamples(ctx, cl, samples, dest, n, max(perTxn, 1), transactional, mode)
}

// createDest creates the WRITE limit's topics (dest's values, one partition each, with the
// cleanup.policy of their source topic) and waits until they have leaders.
func (k *kafkaClient) createDest(ctx context.Context, dest map[string]string, policy map[string]string) error {
	for src, dst := range dest {
		cfg := map[string]*string{"cleanup.policy": new(policy[src])}
		resp, err := k.adm.CreateTopic(ctx, 1, 1, cfg, dst)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return fmt.Errorf("create topic %s: %w", dst, err)
		}
	}
	for _, dst := range dest {
		if err := k.waitTopic(ctx, dst, func() error { return nil }); err != nil {
			return err
		}
	}
	return nil
}

// producerOpts are the WRITE limit producer's options, pkg/sink's settings unless tuned, and a
// description of them for the report.
func producerOpts(brokers []string, codec string, perTxn int, transactional, tuned bool) ([]kgo.Opt, string) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID("tidemark-bench"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(sinkBatchMaxBytes),
		kgo.ProducerLinger(sinkLinger),
		kgo.ProducerBatchCompression(benchCodecs[codec]),
		kgo.MaxBufferedBytes(sinkMaxBufferedBytes),
	}
	mode := "idempotent, acks=all, " + codec
	if tuned {
		opts = append(opts, kgo.ProducerBatchMaxBytes(producerTunedBatch), kgo.ProducerLinger(producerTunedLinger),
			kgo.MaxBufferedBytes(producerTunedBuffered))
		mode = fmt.Sprintf("idempotent, acks=all, batch %d kB, linger %s, buffer %d MiB", producerTunedBatch/1000, producerTunedLinger, producerTunedBuffered>>20)
	}
	if transactional {
		opts = append(opts, kgo.TransactionalID("tidemark-bench-"+testsvc.RandomHex(4)), kgo.TransactionTimeout(sinkTransactionTimout))
		mode = fmt.Sprintf("transactional, %d records/txn, acks=all", perTxn)
	}
	return opts, mode
}

// produceSamples produces n records cycling through samples into dest's topics, perTxn records
// a transaction when transactional, and times it from the first record to the last
// acknowledgement.
func produceSamples(ctx context.Context, cl *kgo.Client, samples []sampleRecord, dest map[string]string, n int64, perTxn int, transactional bool, mode string) (writeResult, error) {
	var (
		errMu    sync.Mutex
		firstErr error
		acked    atomic.Int64
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			errMu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			errMu.Unlock()
			return
		}
		acked.Add(1)
	}
	produceErr := func() error {
		errMu.Lock()
		defer errMu.Unlock()
		return firstErr
	}
	res := writeResult{Mode: mode, PerTxn: perTxn}
	start := time.Now()
	for sent := int64(0); sent < n; {
		batch := min(int64(perTxn), n-sent)
		if transactional {
			if err := cl.BeginTransaction(); err != nil {
				return res, fmt.Errorf("begin transaction: %w", err)
			}
		}
		for i := range batch {
			s := &samples[(sent+i)%int64(len(samples))]
			res.Bytes += int64(len(s.key) + len(s.value))
			cl.Produce(ctx, &kgo.Record{Topic: dest[s.topic], Key: s.key, Value: s.value, Headers: s.headers}, promise)
		}
		sent += batch
		if transactional {
			if err := commitTransaction(ctx, cl); err != nil {
				return res, err
			}
			res.Transactions++
		}
		if err := produceErr(); err != nil {
			return res, fmt.Errorf("produce: %w", err)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return res, fmt.Errorf("flush: %w", err)
	}
	res.Seconds = time.Since(start).Seconds()
	res.Records = acked.Load()
	if err := produceErr(); err != nil {
		return res, fmt.Errorf("produce: %w", err)
	}
	return res, nil
}

// commitTransaction flushes the open transaction's records and commits it.
func commitTransaction(ctx context.Context, cl *kgo.Client) error {
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}

// waitTopic waits until topic exists (cdc creates it at start-up); check reports a dead cdc.
func (k *kafkaClient) waitTopic(ctx context.Context, topic string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		topics, err := k.adm.ListTopics(ctx, topic)
		if err == nil && topics.Has(topic) && topics[topic].Err == nil && hasLeaders(topics[topic]) {
			return nil
		}
		if err := check(); err != nil {
			return fmt.Errorf("wait for topic %s: %w", topic, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for topic %s: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func hasLeaders(t kadm.TopicDetail) bool {
	if len(t.Partitions) == 0 {
		return false
	}
	for _, p := range t.Partitions {
		if p.Leader < 0 || p.Err != nil {
			return false
		}
	}
	return true
}

// writeLimitRounds is how many times the WRITE limit is measured; the best run is the limit.
// One run swung between 200,000 and 524,000 records/s over a day of runs on the same machine
// (the broker's JIT and G1 settle, the page cache fills), and a limit is what the broker can
// take, so the best of several is the honest reference for cdc's ratio.
const writeLimitRounds = 3

// bestWriteLimit runs writeLimit writeLimitRounds times, each into topics of its own (dest's
// names with a round suffix), and returns the fastest run and every run's records/s.
func bestWriteLimit(ctx context.Context, k *kafkaClient, samples []sampleRecord, dest map[string]string, policy map[string]string, n int64, perTxn int) (writeResult, []float64, error) {
	var best writeResult
	var rates []float64
	for round := range writeLimitRounds {
		d := make(map[string]string, len(dest))
		for src, dst := range dest {
			d[src] = fmt.Sprintf("%s.%d", dst, round)
		}
		w, err := writeLimit(ctx, k, samples, d, policy, n, perTxn, true)
		if err != nil {
			return best, rates, err
		}
		rate := float64(w.Records) / w.Seconds
		rates = append(rates, rate)
		if best.Seconds == 0 || rate > float64(best.Records)/best.Seconds {
			best = w
		}
	}
	return best, rates, nil
}

// formatRates renders records/s figures for a note: "200,380 / 412,007 / 388,501".
func formatRates(rates []float64) string {
	s := make([]string, len(rates))
	for i, r := range rates {
		s[i] = thousands(int64(r))
	}
	return strings.Join(s, " / ")
}
