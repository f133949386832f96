package pipeline

import (
	"log/slog"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/schemareg"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// Config is everything the pipeline needs. cmd/cdc fills it from the environment once, after
// validating it; nothing below reads the environment.
type Config struct {
	// PGURL is a libpq connection string or URL; empty fields fall back to libpq's PG* variables
	// (pgx honours them).
	PGURL string
	// PrimaryURL, when PGURL names a hot standby (PostgreSQL 16+), connects to its primary for
	// what a standby cannot do: the chunked strategy's WAL markers, running-transactions
	// records that let slot creation on the standby go on (pg_log_standby_snapshot), and
	// changes to the publication (Tables). Without it, tables on a standby are copied with
	// snapshot.StrategyCopy, which writes nothing. Unused when PGURL names a primary. A
	// secret, like PGURL.
	PrimaryURL string
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

	// Sink holds the sink's own settings: Brokers, Security, Delivery, TransactionTimeout,
	// Compression, and the layout of created topics (Partitions, ReplicationFactor,
	// WatermarkTopic). Zero fields are the sink's defaults, except the topic layout, which is
	// the pipeline's: one partition, the broker's replication factor (-1,
	// default.replication.factor) and TopicPrefix + ".__watermarks". The pipeline fills the transactional id, the dial
	// timeout (ConnectTimeout), the batch bounds, the logger and the registerer.
	Sink sink.Config
	// TopicPrefix names the tables' topics (<prefix>.<schema>.<table>).
	TopicPrefix string

	// Snapshot holds the snapshot stage's own settings (Workers, ChunkRows, SlotWaitTimeout);
	// zero fields are its defaults. The pipeline fills its connection, publication, slot prefix,
	// codec, limiter, batch size, timeouts, logger and registerer.
	Snapshot snapshot.Config
	// SnapshotStrategy is how tables are copied; "" is snapshot.DefaultStrategy.
	SnapshotStrategy snapshot.Strategy
	// SnapshotMaxRowsPerSecond caps the rows all copies read per second; 0 is unlimited. Each
	// life builds one snapshot.NewLimiter from it for the stage and the chunker.
	SnapshotMaxRowsPerSecond int

	// UnchangedToast says what an update's record carries for an unchanged TOASTed column
	// whose old value is unknown: codec.UnchangedOmit (also for "") or
	// codec.UnchangedPlaceholder, which writes UnchangedPlaceholder (codec.DefaultPlaceholder
	// when empty).
	UnchangedToast       codec.Unchanged
	UnchangedPlaceholder string

	// Watermark is the watermark tracker's mode and interval; zero fields are its defaults.
	Watermark watermark.Options
	// ValueFormat is the record format: codec.FormatJSON (default, also when empty),
	// codec.FormatJSONWithSchema or codec.FormatAvro.
	ValueFormat codec.Format
	// Registry is the schema registry where codec.FormatAvro registers its schemas (required by
	// it, unused by the JSON formats). One client serves every life of the pipeline, so its
	// cache of registered schemas outlives a restart of the stages.
	Registry *schemareg.Client
	// PublicationPollInterval is how often pg_publication_tables is polled for added and
	// removed tables.
	PublicationPollInterval time.Duration
	// Replication holds the replication stage's own settings (HoldMemory, SpillDir,
	// PieceBytes); zero fields are its defaults. The pipeline fills its connection, slot,
	// publication, session parameters, marker tag, timeouts, codec and logger.
	Replication replication.Config
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
