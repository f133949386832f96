package sink

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/kafkaconn"
)

// Delivery is the Kafka delivery guarantee of a Sink.
type Delivery string

// Delivery modes.
const (
	// ExactlyOnce produces every batch inside one Kafka transaction (the default).
	ExactlyOnce Delivery = "exactly-once"
	// AtLeastOnce produces with the idempotent producer only; watermarks follow acknowledgements.
	AtLeastOnce Delivery = "at-least-once"
)

// MaxRecordBytes is the largest Kafka record (key, value and headers, plus the record
// batch's framing) the sink can produce. The producer builds record batches of up to this
// size and EnsureTopics creates topics with max.message.bytes set to it, so one row of a
// few MiB (a large text or bytea) round-trips. A larger record fails with
// MESSAGE_TOO_LARGE; callers that want to fail only the row's export should compare the
// encoded size with this limit before handing the unit to Run.
const MaxRecordBytes = 16 << 20

// Defaults applied by New to zero fields of Config.
const (
	DefaultClientID           = "tidemark"
	DefaultMaxBatchBytes      = 16 << 20
	DefaultLinger             = 100 * time.Millisecond
	DefaultTick               = 200 * time.Millisecond
	DefaultTransactionTimeout = 60 * time.Second
	DefaultDialTimeout        = 10 * time.Second
	// DefaultCompression is the batch codec when Config.Compression is empty (see docs/performance.md
	// for the measurement that chose it).
	DefaultCompression = "lz4"

	// producerBatchBytes is the largest record batch of the main producer. franz-go builds each
	// produce request in a pooled buffer that starts at 1 KiB and doubles as it is written, and
	// with 16 MiB batches every request regrew it (and the collector dropped the pool's large
	// buffers): 1 MB batches cost less producer CPU per record (docs/performance.md).
	// In franz-go the batch limit is also the largest record it takes, so records larger than
	// largeRecordBytes go through the large producer.
	producerBatchBytes = 1 << 20
	// largeRecordBytes is the largest record (change.Record.Size) the main producer takes:
	// its batch limit less room for the record batch's framing and the record's varints.
	largeRecordBytes = producerBatchBytes - 16<<10
	// LargeTransactionalIDSuffix is appended to Config.TransactionalID for the large producer,
	// which produces batches that hold a record above 1 MB, up to MaxRecordBytes.
	LargeTransactionalIDSuffix = "-large"

	// metadataMinAge is the shortest time between two metadata refreshes of the producer.
	metadataMinAge = 250 * time.Millisecond
	// producerLinger is kgo's per-partition linger: small, because Run flushes every batch.
	producerLinger = 5 * time.Millisecond
	// concurrentTxnBackoff is kgo's retry delay when the transaction coordinator is still
	// completing the previous transaction.
	concurrentTxnBackoff = 5 * time.Millisecond
)

// Config configures a Sink. The zero value of every field but Brokers is usable.
type Config struct {
	Brokers  []string
	ClientID string // default "tidemark"
	// Delivery defaults to ExactlyOnce.
	Delivery Delivery
	// TransactionalID is required in exactly-once mode, e.g. "tidemark-<slot>". A second
	// instance with the same id fences the first.
	TransactionalID string
	// Partitions and ReplicationFactor apply to topics EnsureTopics creates; zero means the
	// broker's default, and so does a ReplicationFactor of -1 (as in Kafka's CreateTopics).
	Partitions        int32
	ReplicationFactor int16
	// WatermarkTopic is created (compacted, one partition, segments of WatermarkSegmentMS and
	// WatermarkSegmentBytes) by EnsureTopics and read by ReadWatermarks.
	WatermarkTopic string
	// MaxBatchBytes bounds the units of one batch (one Kafka transaction in exactly-once mode),
	// as estimated by change.Unit.Bytes. A single larger unit still forms a batch of its own:
	// units are never split. Default 16 MiB.
	MaxBatchBytes int
	// MaxBulkBatchBytes bounds a batch that holds snapshot rows (KindSnapshot units), so that
	// stream units arriving behind bulk rows wait less; batches of stream units alone grow to
	// MaxBatchBytes (fewer, larger transactions while catching up). Default MaxBatchBytes.
	MaxBulkBatchBytes int
	// Linger is the longest a batch stays open collecting units. Default 100ms.
	Linger time.Duration
	// Tick is how often a Durable call (Acker) without units goes while no unit arrives. Default 200ms.
	Tick time.Duration
	// TransactionTimeout is the Kafka transaction timeout (exactly-once). Default 60s.
	TransactionTimeout time.Duration
	// DialTimeout bounds each connection attempt to a broker (TCP and TLS). Default 10s.
	// Requests are bounded by franz-go's own timeouts: a connection that does not answer a
	// request within them is closed and the request retried on a new one.
	DialTimeout time.Duration
	// Compression is the codec of produced batches: "none", "gzip", "snappy", "lz4" or "zstd".
	// Default DefaultCompression.
	Compression string
	// Security is TLS and SASL for every client of the sink.
	Security kafkaconn.Security
	Logger   *slog.Logger
	// Registerer receives the sink's metrics; nil disables them.
	Registerer prometheus.Registerer
}

// withDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.ClientID == "" {
		cfg.ClientID = DefaultClientID
	}
	if cfg.Delivery == "" {
		cfg.Delivery = ExactlyOnce
	}
	if cfg.MaxBatchBytes == 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.MaxBulkBatchBytes <= 0 || cfg.MaxBulkBatchBytes > cfg.MaxBatchBytes {
		cfg.MaxBulkBatchBytes = cfg.MaxBatchBytes
	}
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = DefaultTransactionTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Compression == "" {
		cfg.Compression = DefaultCompression
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// validate reports every problem of a defaulted Config at once.
func (cfg *Config) validate() error {
	var errs []error
	if len(cfg.Brokers) == 0 {
		errs = append(errs, errors.New("no Kafka brokers configured"))
	}
	for _, b := range cfg.Brokers {
		if b == "" {
			errs = append(errs, errors.New("empty Kafka broker address"))
		}
	}
	switch cfg.Delivery {
	case ExactlyOnce:
		if cfg.TransactionalID == "" {
			errs = append(errs, errors.New("exactly-once delivery needs a transactional id"))
		}
	case AtLeastOnce:
	default:
		errs = append(errs, fmt.Errorf("unknown delivery mode %q (want %q or %q)", cfg.Delivery, ExactlyOnce, AtLeastOnce))
	}
	if cfg.WatermarkTopic == "" {
		errs = append(errs, errors.New("no watermark topic configured"))
	}
	if cfg.Partitions < 0 {
		errs = append(errs, fmt.Errorf("topic partitions %d: must not be negative", cfg.Partitions))
	}
	if cfg.ReplicationFactor < -1 {
		errs = append(errs, fmt.Errorf("replication factor %d: want 1 or more, or -1 for the broker default", cfg.ReplicationFactor))
	}
	if cfg.MaxBatchBytes < 0 {
		errs = append(errs, fmt.Errorf("max batch bytes %d: must not be negative", cfg.MaxBatchBytes))
	}
	if cfg.Linger < 0 || cfg.Tick < 0 {
		errs = append(errs, errors.New("linger and tick must not be negative"))
	}
	if _, err := compressionCodec(cfg.Compression); err != nil {
		errs = append(errs, err)
	}
	if cfg.Delivery == ExactlyOnce && cfg.TransactionTimeout < time.Second {
		errs = append(errs, fmt.Errorf("transaction timeout %s: must be at least 1s", cfg.TransactionTimeout))
	}
	return errors.Join(errs...)
}

// Compressions are the batch codecs Config.Compression accepts.
var Compressions = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// compressionCodec maps a Config.Compression name to franz-go's codec.
func compressionCodec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("unknown compression %q (want one of %s)", name, strings.Join(Compressions, ", "))
}
