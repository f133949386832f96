package pipeline

import (
	"log/slog"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/sink"
)

// Delivery is the Kafka delivery guarantee.
type Delivery string

// Delivery modes.
const (
	ExactlyOnce Delivery = "exactly-once"
	AtLeastOnce Delivery = "at-least-once"
)

// SnapshotStrategy is how a table's rows are copied.
type SnapshotStrategy string

// Snapshot strategies.
const (
	// StrategyChunked copies a table in key-range chunks, each read in a short transaction of
	// its own and merged with the stream: resumable, and no long transaction.
	StrategyChunked SnapshotStrategy = "chunked"
	// StrategyCopy copies the tables added together under one exported snapshot.
	StrategyCopy SnapshotStrategy = "copy"
)

// UnchangedToast is what records carry for a large out-of-line value that an update left
// unchanged and PostgreSQL therefore did not send (tables without REPLICA IDENTITY FULL).
type UnchangedToast string

// Unchanged TOAST policies.
const (
	// UnchangedOmit leaves the column out of the update's after image and names it in the
	// tidemark.unchanged header.
	UnchangedOmit UnchangedToast = "omit"
	// UnchangedPlaceholder writes Config.UnchangedPlaceholder as the value (Debezium's way).
	UnchangedPlaceholder UnchangedToast = "placeholder"
)

// WatermarkMode says how watermarks of different exports relate (see pkg/watermark).
type WatermarkMode string

// Watermark modes.
const (
	Independent WatermarkMode = "independent"
	Global      WatermarkMode = "global"
)

// Config is everything the pipeline needs. cmd/cdc fills it from the environment once, after
// validating it; nothing below reads the environment.
type Config struct {
	// PGURL is a libpq connection string or URL; empty fields fall back to libpq's PG* variables
	// (pgx honours them).
	PGURL string
	// Publication is the PostgreSQL publication whose tables are exported.
	Publication string
	// Tables, when not empty, makes the service create the publication (or add these tables to
	// it). When empty the publication is managed by the user and must exist.
	Tables []change.ExportID
	// Slot is the name of the main logical replication slot.
	Slot string
	// SlotFailover creates the slot with FAILOVER (PostgreSQL 17+), so that a physical standby
	// set up for it holds a synchronised copy that goes on after its promotion; an existing slot
	// is made one. On an older server start-up fails.
	SlotFailover bool

	Brokers []string
	// KafkaSecurity is TLS and SASL for every Kafka client.
	KafkaSecurity   sink.Security
	TopicPrefix     string
	TopicPartitions int32
	// ReplicationFactor of created topics; -1 is the broker's default, zero means 1.
	ReplicationFactor int16
	// WatermarkTopic defaults to TopicPrefix + ".__watermarks".
	WatermarkTopic string
	Delivery       Delivery
	// TransactionTimeout is the Kafka transaction timeout (exactly-once); 0 is the sink's
	// default (60s).
	TransactionTimeout time.Duration
	// KafkaCompression is the batch codec: none, gzip, snappy, lz4 or zstd; "" is the sink's
	// default.
	KafkaCompression string

	SnapshotWorkers int
	// SnapshotStrategy is how tables are copied: StrategyChunked (default) or StrategyCopy.
	// Tables without a key, and tables whose topic needs reconciling (added again, or whose
	// earlier copy never finished), are copied with StrategyCopy either way.
	SnapshotStrategy SnapshotStrategy
	// SnapshotMaxRowsPerSecond caps the rows all copies read per second; 0 is unlimited.
	SnapshotMaxRowsPerSecond int
	// SnapshotChunkRows is the rows of one chunk (chunked strategy); 0 sizes chunks by the
	// table's row width.
	SnapshotChunkRows int

	// UnchangedToast says what an update's record carries for an unchanged TOASTed column
	// whose old value is unknown: UnchangedOmit (default; also for "") or UnchangedPlaceholder,
	// which writes UnchangedPlaceholder (codec.DefaultPlaceholder when empty).
	UnchangedToast       UnchangedToast
	UnchangedPlaceholder string

	WatermarkMode     WatermarkMode
	WatermarkInterval time.Duration
	// ValueFormat is the record format: codec.FormatJSON (default, also when empty) or
	// codec.FormatJSONWithSchema.
	ValueFormat codec.Format
	// PublicationPollInterval is how often pg_publication_tables is polled for added and
	// removed tables.
	PublicationPollInterval time.Duration
	// HoldMemory bounds the in-memory part of each hydrating export's hold buffer, in bytes.
	HoldMemory int64
	// SpillDir holds hold-buffer files beyond HoldMemory.
	SpillDir string
	// TxnPieceBytes is the size past which a transaction's records are handed to Kafka in
	// pieces, before its commit is decoded; 0 is the replication stage's default (4 MiB).
	TxnPieceBytes int
	// SlotWaitTimeout bounds how long creating a replication slot may wait for open transactions.
	SlotWaitTimeout time.Duration
	// StandbyPoll is how often a standby looks whether the slot's holder went away. Default 1s.
	StandbyPoll time.Duration

	// ConnectTimeout bounds each connection attempt to PostgreSQL (unless CDC_PG_URL sets
	// connect_timeout) and each dial to a Kafka broker. Default pgcat.DefaultConnect (10s).
	ConnectTimeout time.Duration
	// ReceiveTimeout bounds every wait for PostgreSQL's next bytes, on every connection: the
	// replication stream (changes or keepalives), copies and catalog queries. A connection
	// that hears nothing for longer is dropped and reopened. Default pgcat.DefaultReceive.
	ReceiveTimeout time.Duration
	// ShutdownTimeout bounds an orderly stop, from the moment Run's context ends: the stages
	// stop, the sink drains what it holds, the slot confirms what Kafka has. What is not
	// confirmed by then is redone at the next start. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// HTTPAddr, when set, serves Prometheus metrics on /metrics and the control endpoints
	// (POST /exports/{export}/resnapshot) (e.g. "127.0.0.1:9187").
	HTTPAddr string

	Logger *slog.Logger
}
