package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/cdc/internal/envdoc"
	"github.com/tidemark/cdc/internal/httpapi"

	"github.com/caarlos0/env/v11"

	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/schemareg"
	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// Env is the service's whole configuration surface: one field per environment variable. Tags:
// env (name, and ",required"), envDefault (applied by caarlos0/env), desc (the meaning shown by
// `cdc help` and in docs/configuration.md) and helpDefault (what help shows as the default when envDefault
// does not say it, e.g. a computed default).
//
// Every field is a string on purpose: LoadConfig parses and range-checks each one itself so that a
// bad value is reported with the variable's name and what is allowed, together with every other
// problem.
type Env struct {
	PGURL        string `env:"CDC_PG_URL" helpDefault:"(PG* variables)" desc:"PostgreSQL connection: URL (postgres://user:pass@host:5432/db) or key=value DSN; required unless PG* variables such as PGHOST are set"`
	PrimaryURL   string `env:"CDC_PG_PRIMARY_URL" helpDefault:"(none)" desc:"when CDC_PG_URL names a hot standby (PostgreSQL 16+): a connection to its primary (URL or key=value DSN), for what a standby cannot write: the chunked copies' markers, the running-transactions records that creating a slot on the standby waits for (pg_log_standby_snapshot), and CDC_TABLES's publication changes; without it tables are copied with the copy strategy (see docs/production.md, Capture from a standby); unused when CDC_PG_URL names a primary; never logged"`
	KafkaBrokers string `env:"CDC_KAFKA_BROKERS,required" helpDefault:"(required)" desc:"Kafka bootstrap brokers, comma-separated host:port"`
	Publication  string `env:"CDC_PUBLICATION" envDefault:"tidemark" desc:"PostgreSQL publication whose tables are exported"`
	Tables       string `env:"CDC_TABLES" helpDefault:"(none)" desc:"comma-separated schema.table list; when set, the service creates the publication or adds these tables to it; when empty the publication must exist"`
	Slot         string `env:"CDC_SLOT" envDefault:"tidemark" desc:"logical replication slot name (a-z, 0-9, _; at most 63)"`
	SlotFailover string `env:"CDC_SLOT_FAILOVER" envDefault:"false" desc:"true: the slot is a failover slot (PostgreSQL 17+; refused on older servers), synchronised to a standby set up for it so that cdc goes on from the standby after its promotion; an existing slot is made one (see docs/production.md, Failover)"`

	TopicPrefix        string `env:"CDC_TOPIC_PREFIX" envDefault:"tidemark" desc:"prefix of every topic: <prefix>.<schema>.<table>"`
	TopicPartitions    string `env:"CDC_TOPIC_PARTITIONS" envDefault:"1" desc:"partitions of each created topic (1 to 10000)"`
	ReplicationFactor  string `env:"CDC_TOPIC_REPLICATION_FACTOR" envDefault:"-1" desc:"replication factor of each created topic (1 to 32767, or -1 for the broker default, default.replication.factor); the watermark topic gets at least the data topics' (see docs/production.md, Kafka cluster)"`
	WatermarkTopic     string `env:"CDC_WATERMARK_TOPIC" helpDefault:"<prefix>.__watermarks" desc:"compacted topic of the watermark records"`
	Delivery           string `env:"CDC_DELIVERY" envDefault:"exactly-once" desc:"Kafka delivery guarantee: exactly-once or at-least-once"`
	KafkaCompression   string `env:"CDC_KAFKA_COMPRESSION" envDefault:"lz4" desc:"codec of produced record batches: none, gzip, snappy, lz4 or zstd (see docs/performance.md for what each costs and saves)"`
	TransactionTimeout string `env:"CDC_KAFKA_TRANSACTION_TIMEOUT" envDefault:"60s" desc:"Kafka transaction timeout (exactly-once; 1s to 15m, at most the broker's transaction.max.timeout.ms): a transaction open longer, e.g. while Kafka is unreachable, is aborted by the broker and redone"`

	KafkaTLS           string `env:"CDC_KAFKA_TLS" envDefault:"false" desc:"true: connect to the brokers over TLS, verifying their certificates (verification cannot be turned off); implied by the other CDC_KAFKA_TLS_* variables (an explicit false with any of them is an error)"`
	KafkaTLSCAFile     string `env:"CDC_KAFKA_TLS_CA_FILE" helpDefault:"(system roots)" desc:"PEM file of the CA certificates that sign the brokers' certificates"`
	KafkaTLSCertFile   string `env:"CDC_KAFKA_TLS_CERT_FILE" helpDefault:"(none)" desc:"PEM client certificate for mutual TLS (with CDC_KAFKA_TLS_KEY_FILE)"`
	KafkaTLSKeyFile    string `env:"CDC_KAFKA_TLS_KEY_FILE" helpDefault:"(none)" desc:"PEM private key of CDC_KAFKA_TLS_CERT_FILE"`
	KafkaTLSServerName string `env:"CDC_KAFKA_TLS_SERVER_NAME" helpDefault:"(the broker's host)" desc:"name the brokers' certificates are verified against"`
	KafkaSASLMechanism string `env:"CDC_KAFKA_SASL_MECHANISM" envDefault:"none" desc:"none, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"`
	KafkaSASLUsername  string `env:"CDC_KAFKA_SASL_USERNAME" helpDefault:"(none)" desc:"SASL user (PLAIN, SCRAM)"`
	KafkaSASLPassword  string `env:"CDC_KAFKA_SASL_PASSWORD" helpDefault:"(none)" desc:"SASL password (PLAIN, SCRAM); never logged"`
	KafkaOAuthToken    string `env:"CDC_KAFKA_SASL_OAUTH_TOKEN" helpDefault:"(none)" desc:"OAUTHBEARER token; never logged"`
	KafkaOAuthFile     string `env:"CDC_KAFKA_SASL_OAUTH_TOKEN_FILE" helpDefault:"(none)" desc:"file holding the OAUTHBEARER token, read again whenever it changes (a rotated token)"`
	RequireTLS         string `env:"CDC_REQUIRE_TLS" envDefault:"false" desc:"true: refuse to start unless every connection is encrypted and its server verified: PostgreSQL with sslmode=verify-full (or a local Unix socket), Kafka with CDC_KAFKA_TLS; false only warns (see docs/production.md, TLS posture)"`

	SchemaRegistryURL        string `env:"CDC_SCHEMA_REGISTRY_URL" helpDefault:"(none)" desc:"base URL of a Confluent-compatible schema registry's API (Confluent, Apicurio's .../apis/ccompat/v7, Redpanda, Karapace), where CDC_VALUE_FORMAT=avro registers its schemas (required by it); cdc check reports it (reachable, credentials, compatibility level); https:// verifies the registry's certificate as CDC_KAFKA_TLS does the brokers' (verification cannot be turned off); no user info in it"`
	SchemaRegistryUsername   string `env:"CDC_SCHEMA_REGISTRY_USERNAME" helpDefault:"(none)" desc:"HTTP basic auth user of the schema registry (with CDC_SCHEMA_REGISTRY_PASSWORD)"`
	SchemaRegistryPassword   string `env:"CDC_SCHEMA_REGISTRY_PASSWORD" helpDefault:"(none)" desc:"HTTP basic auth password of the schema registry; never logged"`
	SchemaRegistryCAFile     string `env:"CDC_SCHEMA_REGISTRY_TLS_CA_FILE" helpDefault:"(system roots)" desc:"PEM file of the CA certificates that sign the schema registry's certificate (https:// only)"`
	SchemaRegistryCertFile   string `env:"CDC_SCHEMA_REGISTRY_TLS_CERT_FILE" helpDefault:"(none)" desc:"PEM client certificate for mutual TLS with the schema registry (with CDC_SCHEMA_REGISTRY_TLS_KEY_FILE)"`
	SchemaRegistryKeyFile    string `env:"CDC_SCHEMA_REGISTRY_TLS_KEY_FILE" helpDefault:"(none)" desc:"PEM private key of CDC_SCHEMA_REGISTRY_TLS_CERT_FILE"`
	SchemaRegistryServerName string `env:"CDC_SCHEMA_REGISTRY_TLS_SERVER_NAME" helpDefault:"(the URL's host)" desc:"name the schema registry's certificate is verified against"`

	SnapshotWorkers   string `env:"CDC_SNAPSHOT_WORKERS" envDefault:"4" desc:"parallel COPY connections: chunks in flight at once (chunked), or ranges per snapshot (copy) (1 to 64)"`
	SnapshotStrategy  string `env:"CDC_SNAPSHOT_STRATEGY" envDefault:"chunked" desc:"how tables are copied: chunked (key-range chunks in short transactions, merged with the stream; resumes after a restart) or copy (one exported snapshot for the whole copy); tables without a key always use copy"`
	SnapshotMaxRows   string `env:"CDC_SNAPSHOT_MAX_ROWS_PER_SECOND" envDefault:"0" desc:"cap on the rows all copies read per second together, to spare the primary (0 = unlimited)"`
	SnapshotChunkRows string `env:"CDC_SNAPSHOT_CHUNK_ROWS" envDefault:"0" desc:"rows per chunk of a chunked copy (0 = about 1 MiB of the table each, 1,000 to 10,000 rows; at most 1,000,000)"`

	UnchangedToast       string `env:"CDC_UNCHANGED_TOAST" envDefault:"omit" desc:"an update that leaves a large out-of-line (TOASTed) value unchanged does not carry it unless the table has REPLICA IDENTITY FULL: omit leaves the column out of after and names it in the tidemark.unchanged header; placeholder writes CDC_UNCHANGED_TOAST_PLACEHOLDER instead, as Debezium does"`
	UnchangedPlaceholder string `env:"CDC_UNCHANGED_TOAST_PLACEHOLDER" envDefault:"__debezium_unavailable_value" desc:"the string written for an unchanged TOASTed value with CDC_UNCHANGED_TOAST=placeholder"`

	ValueFormat             string `env:"CDC_VALUE_FORMAT" envDefault:"json" desc:"record format: json (plain JSON envelopes), json-with-schema (Kafka Connect JsonConverter with schemas.enable=true, Debezium's PostgreSQL types) or avro (Confluent's wire format with Debezium's Avro schemas, registered in CDC_SCHEMA_REGISTRY_URL)"`
	WatermarkMode           string `env:"CDC_WATERMARK_MODE" envDefault:"independent" desc:"independent (each table its own watermark) or global (one watermark for all)"`
	WatermarkInterval       string `env:"CDC_WATERMARK_INTERVAL" envDefault:"1s" desc:"how often watermark records are written (at least 10ms)"`
	PublicationPollInterval string `env:"CDC_PUBLICATION_POLL_INTERVAL" envDefault:"5s" desc:"how often the publication is polled for added and removed tables (at least 100ms)"`
	HoldMemory              string `env:"CDC_HOLD_MEMORY" envDefault:"64MiB" desc:"memory per hydrating table for changes held back during its snapshot; beyond it they spill to disk (at least 1MiB; suffixes KiB, MiB, GiB, KB, MB, GB)"`
	SpillDir                string `env:"CDC_SPILL_DIR" helpDefault:"$TMPDIR/tidemark-spill" desc:"directory of the hold-buffer spill files"`
	TxnPieceSize            string `env:"CDC_TXN_PIECE_SIZE" envDefault:"4MiB" desc:"a transaction whose changes pass this size is published in pieces of it, across several Kafka transactions; at most 8 times this size of changes wait for Kafka in memory (64KiB to 64MiB)"`
	StreamEncoders          string `env:"CDC_STREAM_ENCODERS" helpDefault:"(CPUs − 1, at most 4)" desc:"goroutines that encode row changes beside the one reading the replication stream, which keeps their order (0 to 16; 0 encodes in that goroutine, as does a process with one CPU, GOMAXPROCS=1); the default counts GOMAXPROCS"`
	SlotWaitTimeout         string `env:"CDC_SLOT_WAIT_TIMEOUT" envDefault:"5m" desc:"how long creating a replication slot may wait for open transactions"`

	ConnectTimeout  string `env:"CDC_CONNECT_TIMEOUT" envDefault:"10s" desc:"bound of each connection attempt to PostgreSQL (unless CDC_PG_URL sets connect_timeout) and to a Kafka broker; a server that never answers is an error after it (1s to 10m)"`
	ReceiveTimeout  string `env:"CDC_RECEIVE_TIMEOUT" envDefault:"60s" desc:"a PostgreSQL connection that hears nothing for this long while it waits for an answer (the replication stream: no change and no keepalive) is taken as dead, dropped and reopened, like PostgreSQL's wal_receiver_timeout (1s to 1h)"`
	ShutdownTimeout string `env:"CDC_SHUTDOWN_TIMEOUT" envDefault:"20s" desc:"bound of an orderly stop after SIGTERM or SIGINT: draining to Kafka and confirming the slot; past it cdc exits anyway, and what was not confirmed is sent again at the next start (2s to 10m; keep it below the orchestrator's grace period, 30s in Kubernetes)"`

	HTTPAddr    string `env:"CDC_HTTP_ADDR" helpDefault:"(disabled)" desc:"host:port of the service's HTTP endpoints: the status page (/, /status), /healthz, /readyz, /exports, /metrics (Prometheus), POST /exports/<schema.table>/resnapshot; e.g. 127.0.0.1:9187 (:9187 or 0.0.0.0:9187 listens on every interface: see docs/production.md, HTTP endpoints)"`
	MetricsAddr string `env:"CDC_METRICS_ADDR" helpDefault:"(none)" desc:"older name of CDC_HTTP_ADDR, still read"`

	HTTPToken       string `env:"CDC_HTTP_TOKEN" helpDefault:"(none: admin endpoints off)" desc:"bearer token of the admin HTTP endpoints (re-copy, pprof, full error texts on /exports and /readyz), sent as Authorization: Bearer <token>; at least 16 printable ASCII characters, no spaces; never logged. cdc resnapshot sends it too"`
	HTTPTokenFile   string `env:"CDC_HTTP_TOKEN_FILE" helpDefault:"(none)" desc:"file holding CDC_HTTP_TOKEN (a mounted secret), read at start; surrounding white space is ignored"`
	HTTPPprof       string `env:"CDC_HTTP_PPROF" envDefault:"false" desc:"true: serve Go's pprof profiles on /debug/pprof/, behind the admin token (needs CDC_HTTP_TOKEN)"`
	HTTPIdleTimeout string `env:"CDC_HTTP_IDLE_TIMEOUT" envDefault:"60s" desc:"an idle keep-alive connection to the HTTP endpoints is closed after this long (1s to 1h)"`

	MemoryLimit string `env:"CDC_MEMORY_LIMIT" envDefault:"200MiB" desc:"soft limit of the Go heap (the runtime's memory limit): the garbage collector works harder as the heap nears it, so the process stays near or below it; 0 leaves it to GOMEMLIMIT or unlimited (at least 64MiB)"`
	LogLevel    string `env:"CDC_LOG_LEVEL" envDefault:"info" desc:"debug, info, warn or error"`
	LogFormat   string `env:"CDC_LOG_FORMAT" envDefault:"json" desc:"json or text"`
}

// Settings is the validated configuration: the pipeline's (without its Logger) and the logger's.
type Settings struct {
	Pipeline pipeline.Config
	// HTTP is the HTTP endpoints' settings apart from the address (Pipeline.HTTPAddr).
	HTTP httpapi.Config
	// MemoryLimit is the Go runtime's soft memory limit in bytes; 0 leaves it alone.
	MemoryLimit int64
	LogLevel    slog.Level
	LogFormat   string // "json" or "text"
	// TLS is how each connection (PostgreSQL, Kafka) is protected, as the configuration
	// decides it; logged at start and printed by `cdc check`.
	TLS []tlsPosture
	// Registry is the schema registry's client configuration; URL "" when none is set.
	Registry schemareg.Config
}

// LogValue logs the settings with the PostgreSQL password redacted.
func (s Settings) LogValue() slog.Value {
	p := s.Pipeline
	return slog.GroupValue(
		slog.String("pg_url", secret.Redact(p.PGURL)),
		slog.String("pg_primary_url", secret.Redact(p.PrimaryURL)),
		slog.String("publication", p.Publication),
		slog.Any("tables", p.Tables),
		slog.String("slot", p.Slot),
		slog.Any("brokers", p.Sink.Brokers),
		slog.Bool("kafka_tls", p.Sink.Security.TLS),
		slog.String("kafka_sasl_mechanism", p.Sink.Security.SASLMechanism),
		slog.String("kafka_sasl_username", p.Sink.Security.Username),
		slog.String("schema_registry_url", s.Registry.URL),
		slog.String("http_addr", p.HTTPAddr),
		slog.Any("http_token", s.HTTP.Token),
		slog.Bool("http_pprof", s.HTTP.Pprof),
		slog.String("topic_prefix", p.TopicPrefix),
		slog.String("watermark_topic", p.Sink.WatermarkTopic),
		slog.String("delivery", string(p.Sink.Delivery)),
		slog.String("watermark_mode", string(p.Watermark.Mode)),
		slog.String("value_format", string(p.ValueFormat)),
		slog.Int("snapshot_workers", p.Snapshot.Workers),
		slog.Int("stream_encoders", p.Replication.Encoders),
		slog.String("unchanged_toast", string(p.UnchangedToast)),
		slog.Int64("memory_limit_bytes", s.MemoryLimit),
	)
}

// ConfigError lists every configuration problem; main exits with code 2 on it. Each problem names
// its variable. Error prints one problem per line.
type ConfigError struct {
	Problems []error
}

func (e *ConfigError) Error() string   { return errors.Join(e.Problems...).Error() }
func (e *ConfigError) Unwrap() []error { return e.Problems }

// varError is one problem with one variable. Value is shown quoted when not empty; it must already
// be redacted.
type varError struct {
	Name  string
	Value string
	Msg   string
}

func (e *varError) Error() string {
	if e.Value == "" {
		return e.Name + ": " + e.Msg
	}
	return e.Name + "=" + quoteCut(e.Value) + ": " + e.Msg
}

// LoadConfig reads and validates the environment through getenv. environ (os.Environ() in main; nil
// skips the check) is used only to find unknown CDC_* variables, which are problems too: a
// misspelt variable silently ignored is worse than a refusal to start. On any problem it returns a
// *ConfigError listing all of them.
func LoadConfig(getenv func(string) string, environ []string) (Settings, error) {
	var c checker
	c.unknownVars(environ)
	e := c.parseEnv(getenv, environ)

	prefix := c.topic("CDC_TOPIC_PREFIX", e.TopicPrefix, 200)
	watermarkTopic := e.WatermarkTopic
	if watermarkTopic == "" {
		watermarkTopic = prefix + ".__watermarks"
	}
	spillDir := e.SpillDir
	if spillDir == "" {
		spillDir = filepath.Join(os.TempDir(), "tidemark-spill")
	}
	pgURL, pgConfig := c.pgURL(e.PGURL, getenv)
	primaryURL, primaryConfig := c.primaryURL(e.PrimaryURL)
	s := Settings{
		Pipeline: pipeline.Config{
			PGURL:        pgURL,
			PrimaryURL:   primaryURL,
			Publication:  c.identifier("CDC_PUBLICATION", e.Publication),
			Tables:       c.tables(e.Tables, prefix),
			Slot:         c.slot(e.Slot),
			SlotFailover: c.boolean("CDC_SLOT_FAILOVER", e.SlotFailover),
			Sink: sink.Config{
				Brokers:            c.brokers(e.KafkaBrokers),
				Security:           c.kafkaSecurity(e),
				Partitions:         int32(c.integer("CDC_TOPIC_PARTITIONS", e.TopicPartitions, 1, 10000, "")),
				ReplicationFactor:  int16(c.integer("CDC_TOPIC_REPLICATION_FACTOR", e.ReplicationFactor, 1, math.MaxInt16, "-1")),
				WatermarkTopic:     c.topic("CDC_WATERMARK_TOPIC", watermarkTopic, 249),
				Delivery:           oneOf(&c, "CDC_DELIVERY", e.Delivery, sink.ExactlyOnce, sink.AtLeastOnce),
				Compression:        oneOf(&c, "CDC_KAFKA_COMPRESSION", e.KafkaCompression, sink.Compressions...),
				TransactionTimeout: c.durationBetween("CDC_KAFKA_TRANSACTION_TIMEOUT", e.TransactionTimeout, time.Second, 15*time.Minute),
			},
			TopicPrefix: prefix,
		},
	}
	// The rest is checked in the order of the variables (problems are listed in it), each into
	// the configuration of the stage that owns it.
	s.Registry = c.schemaRegistry(e)
	p := &s.Pipeline
	p.Snapshot.Workers = int(c.integer("CDC_SNAPSHOT_WORKERS", e.SnapshotWorkers, 1, 64, ""))
	p.SnapshotStrategy = oneOf(&c, "CDC_SNAPSHOT_STRATEGY", e.SnapshotStrategy, snapshot.StrategyChunked, snapshot.StrategyCopy)
	p.SnapshotMaxRowsPerSecond = int(c.integer("CDC_SNAPSHOT_MAX_ROWS_PER_SECOND", e.SnapshotMaxRows, 0, math.MaxInt32, ""))
	p.Snapshot.ChunkRows = int(c.integer("CDC_SNAPSHOT_CHUNK_ROWS", e.SnapshotChunkRows, 0, 1_000_000, ""))
	p.UnchangedToast = oneOf(&c, "CDC_UNCHANGED_TOAST", e.UnchangedToast, codec.UnchangedOmit, codec.UnchangedPlaceholder)
	p.UnchangedPlaceholder = c.placeholder("CDC_UNCHANGED_TOAST_PLACEHOLDER", e.UnchangedPlaceholder)
	p.Watermark.Mode = oneOf(&c, "CDC_WATERMARK_MODE", e.WatermarkMode, watermark.ModeIndependent, watermark.ModeGlobal)
	p.ValueFormat = oneOf(&c, "CDC_VALUE_FORMAT", e.ValueFormat, codec.Formats()...)
	p.Watermark.Interval = c.duration("CDC_WATERMARK_INTERVAL", e.WatermarkInterval, 10*time.Millisecond)
	p.PublicationPollInterval = c.duration("CDC_PUBLICATION_POLL_INTERVAL", e.PublicationPollInterval, 100*time.Millisecond)
	p.Replication.HoldMemory = c.bytes("CDC_HOLD_MEMORY", e.HoldMemory, 1<<20, math.MaxInt64, "at least 1MiB")
	p.Replication.SpillDir = spillDir
	p.Replication.PieceBytes = int(c.bytes("CDC_TXN_PIECE_SIZE", e.TxnPieceSize, 64<<10, 64<<20, "from 64KiB to 64MiB"))
	p.Replication.Encoders = streamEncoders(&c, e.StreamEncoders)
	p.Snapshot.SlotWaitTimeout = c.duration("CDC_SLOT_WAIT_TIMEOUT", e.SlotWaitTimeout, time.Second)
	p.ConnectTimeout = c.durationBetween("CDC_CONNECT_TIMEOUT", e.ConnectTimeout, time.Second, 10*time.Minute)
	p.ReceiveTimeout = c.durationBetween("CDC_RECEIVE_TIMEOUT", e.ReceiveTimeout, time.Second, time.Hour)
	p.ShutdownTimeout = c.durationBetween("CDC_SHUTDOWN_TIMEOUT", e.ShutdownTimeout, 2*time.Second, 10*time.Minute)
	p.HTTPAddr = c.httpAddr(e.HTTPAddr, e.MetricsAddr)
	s.LogFormat = oneOf(&c, "CDC_LOG_FORMAT", e.LogFormat, "json", "text")
	s.HTTP = c.httpConfig(e)
	if e.MemoryLimit != "0" {
		s.MemoryLimit = c.bytes("CDC_MEMORY_LIMIT", e.MemoryLimit, 64<<20, math.MaxInt64, "at least 64MiB, or 0")
	}
	switch oneOf(&c, "CDC_LOG_LEVEL", e.LogLevel, "debug", "info", "warn", "error") {
	case "debug":
		s.LogLevel = slog.LevelDebug
	case "warn":
		s.LogLevel = slog.LevelWarn
	case "error":
		s.LogLevel = slog.LevelError
	default:
		s.LogLevel = slog.LevelInfo
	}
	c.contradictions(e, s.Pipeline)
	s.TLS = c.tlsPostures(e.RequireTLS, pgConfig, primaryConfig, s.Pipeline.Sink.Security)
	if len(c.problems) > 0 {
		return Settings{}, &ConfigError{Problems: c.problems}
	}
	return s, nil
}

// envVars lists the variables of Env in declaration order.
func envVars() []envdoc.Var { return envdoc.Vars[Env]() }

// checker collects problems; each method validates one kind of value, records what is wrong and
// returns the zero value when something is.
type checker struct {
	problems []error
	// set holds the variables given a value (not empty), as opposed to taking their default;
	// empty those set to nothing, already reported.
	set, empty map[string]bool
}

func (c *checker) add(name, value, format string, args ...any) {
	c.problems = append(c.problems, &varError{Name: name, Value: value, Msg: fmt.Sprintf(format, args...)})
}

// parseEnv fills Env from getenv with caarlos0/env, which applies the defaults. Only Env's own
// variables are looked up, so nothing else of the process environment is read. A variable that
// is set but empty or blank (environ shows it) is a problem, not its default: CDC_SLOT= is more
// likely a template that lost its value than a wish for the default.
func (c *checker) parseEnv(getenv func(string) string, environ []string) Env {
	vars := make(map[string]string) // never nil: a nil map makes env read os.Environ
	c.set = make(map[string]bool)
	empty := c.emptyVars(getenv, environ)
	c.empty = empty
	for _, v := range envVars() {
		if val := strings.TrimSpace(getenv(v.Name)); val != "" {
			vars[v.Name] = val
			c.set[v.Name] = true
		}
	}
	var e Env
	err := env.ParseWithOptions(&e, env.Options{Environment: vars})
	for _, err := range unwrapAll(err) {
		if notSet, ok := errors.AsType[env.VarIsNotSetError](err); ok {
			if empty[notSet.Key] {
				continue // reported as empty
			}
			c.add(notSet.Key, "", "required but not set; want %s", describe(notSet.Key))
			continue
		}
		c.problems = append(c.problems, fmt.Errorf("read environment: %w", err))
	}
	return e
}

// describe returns the help text of a variable.
func describe(name string) string {
	for _, v := range envVars() {
		if v.Name == name {
			return v.Desc
		}
	}
	return "see `cdc help`"
}

func unwrapAll(err error) []error {
	if err == nil {
		return nil
	}
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		return multi.Unwrap()
	}
	return []error{err}
}

// unknownVars reports CDC_* variables that Env does not declare, with the closest known names.
func (c *checker) unknownVars(environ []string) {
	var known []string
	for _, v := range envVars() {
		known = append(known, v.Name)
	}
	seen := make(map[string]bool)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "CDC_") || slices.Contains(known, name) || seen[name] {
			continue
		}
		seen[name] = true
		// The value is never shown: a misspelt variable may well hold a password.
		if near := closest(name, known); len(near) > 0 {
			c.add(name, "", "unknown variable; did you mean %s?", strings.Join(near, " or "))
		} else {
			c.add(name, "", "unknown variable; run `cdc help` for the list")
		}
	}
}

// closest returns up to three known names near name: within an edit distance of 3, or containing
// its words (CDC_BROKERS -> CDC_KAFKA_BROKERS), nearest first.
func closest(name string, known []string) []string {
	type cand struct {
		name string
		dist int
	}
	var cands []cand
	stem := strings.TrimPrefix(name, "CDC_")
	for _, k := range known {
		d := editDistance(name, k)
		if d <= 3 || len(stem) >= 4 && strings.Contains(k, stem) {
			cands = append(cands, cand{k, d})
		}
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return a.dist - b.dist })
	var out []string
	for _, c := range cands[:min(3, len(cands))] {
		out = append(out, c.name)
	}
	return out
}

// editDistance is the Levenshtein distance of two ASCII strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// streamEncoders reads CDC_STREAM_ENCODERS; unset, it is one per P besides the stream
// goroutine's, at most 4.
func streamEncoders(c *checker, s string) int {
	if s == "" {
		return streamEncodersFor(runtime.GOMAXPROCS(0))
	}
	return int(c.integer("CDC_STREAM_ENCODERS", s, 0, 16, ""))
}

// streamEncodersFor is CDC_STREAM_ENCODERS's default with procs Ps.
func streamEncodersFor(procs int) int { return min(max(procs-1, 0), 4) }
