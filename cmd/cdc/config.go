package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidemark/cdc/internal/envdoc"

	"github.com/caarlos0/env/v11"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/sink"
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
	KafkaBrokers string `env:"CDC_KAFKA_BROKERS,required" helpDefault:"(required)" desc:"Kafka bootstrap brokers, comma-separated host:port"`
	Publication  string `env:"CDC_PUBLICATION" envDefault:"tidemark" desc:"PostgreSQL publication whose tables are exported"`
	Tables       string `env:"CDC_TABLES" helpDefault:"(none)" desc:"comma-separated schema.table list; when set, the service creates the publication or adds these tables to it; when empty the publication must exist"`
	Slot         string `env:"CDC_SLOT" envDefault:"tidemark" desc:"logical replication slot name (a-z, 0-9, _; at most 63)"`
	SlotFailover string `env:"CDC_SLOT_FAILOVER" envDefault:"false" desc:"true: the slot is a failover slot (PostgreSQL 17+; refused on older servers), synchronised to a standby set up for it so that cdc goes on from the standby after its promotion; an existing slot is made one (see docs/production.md, Failover)"`

	TopicPrefix        string `env:"CDC_TOPIC_PREFIX" envDefault:"tidemark" desc:"prefix of every topic: <prefix>.<schema>.<table>"`
	TopicPartitions    string `env:"CDC_TOPIC_PARTITIONS" envDefault:"1" desc:"partitions of each created topic (1 to 10000)"`
	ReplicationFactor  string `env:"CDC_TOPIC_REPLICATION_FACTOR" envDefault:"1" desc:"replication factor of each created topic (1 to 32767, or -1 for the broker default)"`
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

	SnapshotWorkers   string `env:"CDC_SNAPSHOT_WORKERS" envDefault:"4" desc:"parallel COPY connections: chunks in flight at once (chunked), or ranges per snapshot (copy) (1 to 64)"`
	SnapshotStrategy  string `env:"CDC_SNAPSHOT_STRATEGY" envDefault:"chunked" desc:"how tables are copied: chunked (key-range chunks in short transactions, merged with the stream; resumes after a restart) or copy (one exported snapshot for the whole copy); tables without a key always use copy"`
	SnapshotMaxRows   string `env:"CDC_SNAPSHOT_MAX_ROWS_PER_SECOND" envDefault:"0" desc:"cap on the rows all copies read per second together, to spare the primary (0 = unlimited)"`
	SnapshotChunkRows string `env:"CDC_SNAPSHOT_CHUNK_ROWS" envDefault:"0" desc:"rows per chunk of a chunked copy (0 = about 1 MiB of the table each, 1,000 to 10,000 rows; at most 1,000,000)"`

	UnchangedToast       string `env:"CDC_UNCHANGED_TOAST" envDefault:"omit" desc:"an update that leaves a large out-of-line (TOASTed) value unchanged does not carry it unless the table has REPLICA IDENTITY FULL: omit leaves the column out of after and names it in the tidemark.unchanged header; placeholder writes CDC_UNCHANGED_TOAST_PLACEHOLDER instead, as Debezium does"`
	UnchangedPlaceholder string `env:"CDC_UNCHANGED_TOAST_PLACEHOLDER" envDefault:"__debezium_unavailable_value" desc:"the string written for an unchanged TOASTed value with CDC_UNCHANGED_TOAST=placeholder"`

	ValueFormat             string `env:"CDC_VALUE_FORMAT" envDefault:"json" desc:"record format: json (plain JSON envelopes) or json-with-schema (Kafka Connect JsonConverter with schemas.enable=true, Debezium's PostgreSQL types)"`
	WatermarkMode           string `env:"CDC_WATERMARK_MODE" envDefault:"independent" desc:"independent (each table its own watermark) or global (one watermark for all)"`
	WatermarkInterval       string `env:"CDC_WATERMARK_INTERVAL" envDefault:"1s" desc:"how often watermark records are written (at least 10ms)"`
	PublicationPollInterval string `env:"CDC_PUBLICATION_POLL_INTERVAL" envDefault:"5s" desc:"how often the publication is polled for added and removed tables (at least 100ms)"`
	HoldMemory              string `env:"CDC_HOLD_MEMORY" envDefault:"64MiB" desc:"memory per hydrating table for changes held back during its snapshot; beyond it they spill to disk (at least 1MiB; suffixes KiB, MiB, GiB, KB, MB, GB)"`
	SpillDir                string `env:"CDC_SPILL_DIR" helpDefault:"$TMPDIR/tidemark-spill" desc:"directory of the hold-buffer spill files"`
	TxnPieceSize            string `env:"CDC_TXN_PIECE_SIZE" envDefault:"4MiB" desc:"a transaction whose changes pass this size is published in pieces of it, across several Kafka transactions; at most 8 times this size of changes wait for Kafka in memory (64KiB to 64MiB)"`
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
	HTTP httpConfig
	// MemoryLimit is the Go runtime's soft memory limit in bytes; 0 leaves it alone.
	MemoryLimit int64
	LogLevel    slog.Level
	LogFormat   string // "json" or "text"
	// TLS is how each connection (PostgreSQL, Kafka) is protected, as the configuration
	// decides it; logged at start and printed by `cdc check`.
	TLS []tlsPosture
}

// LogValue logs the settings with the PostgreSQL password redacted.
func (s Settings) LogValue() slog.Value {
	p := s.Pipeline
	return slog.GroupValue(
		slog.String("pg_url", secret.Redact(p.PGURL)),
		slog.String("publication", p.Publication),
		slog.Any("tables", p.Tables),
		slog.String("slot", p.Slot),
		slog.Any("brokers", p.Brokers),
		slog.Bool("kafka_tls", p.KafkaSecurity.TLS),
		slog.String("kafka_sasl_mechanism", p.KafkaSecurity.SASLMechanism),
		slog.String("kafka_sasl_username", p.KafkaSecurity.Username),
		slog.String("http_addr", p.HTTPAddr),
		slog.Any("http_token", s.HTTP.Token),
		slog.Bool("http_pprof", s.HTTP.Pprof),
		slog.String("topic_prefix", p.TopicPrefix),
		slog.String("watermark_topic", p.WatermarkTopic),
		slog.String("delivery", string(p.Delivery)),
		slog.String("watermark_mode", string(p.WatermarkMode)),
		slog.String("value_format", string(p.ValueFormat)),
		slog.Int("snapshot_workers", p.SnapshotWorkers),
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
	s := Settings{
		Pipeline: pipeline.Config{
			PGURL:                    pgURL,
			Publication:              c.identifier("CDC_PUBLICATION", e.Publication),
			Tables:                   c.tables(e.Tables, prefix),
			Slot:                     c.slot(e.Slot),
			SlotFailover:             c.boolean("CDC_SLOT_FAILOVER", e.SlotFailover),
			Brokers:                  c.brokers(e.KafkaBrokers),
			KafkaSecurity:            c.kafkaSecurity(e),
			TopicPrefix:              prefix,
			TopicPartitions:          int32(c.integer("CDC_TOPIC_PARTITIONS", e.TopicPartitions, 1, 10000, "")),
			ReplicationFactor:        int16(c.integer("CDC_TOPIC_REPLICATION_FACTOR", e.ReplicationFactor, 1, math.MaxInt16, "-1")),
			WatermarkTopic:           c.topic("CDC_WATERMARK_TOPIC", watermarkTopic, 249),
			Delivery:                 oneOf(&c, "CDC_DELIVERY", e.Delivery, pipeline.ExactlyOnce, pipeline.AtLeastOnce),
			KafkaCompression:         oneOf(&c, "CDC_KAFKA_COMPRESSION", e.KafkaCompression, sink.Compressions...),
			TransactionTimeout:       c.durationBetween("CDC_KAFKA_TRANSACTION_TIMEOUT", e.TransactionTimeout, time.Second, 15*time.Minute),
			SnapshotWorkers:          int(c.integer("CDC_SNAPSHOT_WORKERS", e.SnapshotWorkers, 1, 64, "")),
			SnapshotStrategy:         oneOf(&c, "CDC_SNAPSHOT_STRATEGY", e.SnapshotStrategy, pipeline.StrategyChunked, pipeline.StrategyCopy),
			SnapshotMaxRowsPerSecond: int(c.integer("CDC_SNAPSHOT_MAX_ROWS_PER_SECOND", e.SnapshotMaxRows, 0, math.MaxInt32, "")),
			SnapshotChunkRows:        int(c.integer("CDC_SNAPSHOT_CHUNK_ROWS", e.SnapshotChunkRows, 0, 1_000_000, "")),
			UnchangedToast:           oneOf(&c, "CDC_UNCHANGED_TOAST", e.UnchangedToast, pipeline.UnchangedOmit, pipeline.UnchangedPlaceholder),
			UnchangedPlaceholder:     c.placeholder("CDC_UNCHANGED_TOAST_PLACEHOLDER", e.UnchangedPlaceholder),
			WatermarkMode:            oneOf(&c, "CDC_WATERMARK_MODE", e.WatermarkMode, pipeline.Independent, pipeline.Global),
			ValueFormat:              oneOf(&c, "CDC_VALUE_FORMAT", e.ValueFormat, codec.FormatJSON, codec.FormatJSONWithSchema),
			WatermarkInterval:        c.duration("CDC_WATERMARK_INTERVAL", e.WatermarkInterval, 10*time.Millisecond),
			PublicationPollInterval:  c.duration("CDC_PUBLICATION_POLL_INTERVAL", e.PublicationPollInterval, 100*time.Millisecond),
			HoldMemory:               c.bytes("CDC_HOLD_MEMORY", e.HoldMemory, 1<<20, math.MaxInt64, "at least 1MiB"),
			SpillDir:                 spillDir,
			TxnPieceBytes:            int(c.bytes("CDC_TXN_PIECE_SIZE", e.TxnPieceSize, 64<<10, 64<<20, "from 64KiB to 64MiB")),
			SlotWaitTimeout:          c.duration("CDC_SLOT_WAIT_TIMEOUT", e.SlotWaitTimeout, time.Second),
			ConnectTimeout:           c.durationBetween("CDC_CONNECT_TIMEOUT", e.ConnectTimeout, time.Second, 10*time.Minute),
			ReceiveTimeout:           c.durationBetween("CDC_RECEIVE_TIMEOUT", e.ReceiveTimeout, time.Second, time.Hour),
			ShutdownTimeout:          c.durationBetween("CDC_SHUTDOWN_TIMEOUT", e.ShutdownTimeout, 2*time.Second, 10*time.Minute),
			HTTPAddr:                 c.httpAddr(e.HTTPAddr, e.MetricsAddr),
		},
		LogFormat: oneOf(&c, "CDC_LOG_FORMAT", e.LogFormat, "json", "text"),
	}
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
	s.TLS = c.tlsPostures(e.RequireTLS, pgConfig, s.Pipeline.KafkaSecurity)
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

// pgURL checks that a connection is configured and that CDC_PG_URL parses. Without CDC_PG_URL,
// pgx builds the connection from libpq's PG* variables alone, read from the process environment
// (not getenv); they are parsed here only for the TLS posture, and their errors left to pgx.
//
// It returns the connection string and pgx's parsed configuration (nil when there is a problem
// or, without CDC_PG_URL, when the PG* variables are taken as they are). Every file the
// connection names (sslrootcert, sslcert, sslkey, passfile, service file) is checked first,
// without blocking, because pgx reads them as it parses.
func (c *checker) pgURL(s string, getenv func(string) string) (string, *pgconn.Config) {
	if !c.pgFiles(s, getenv) {
		return "", nil
	}
	if s == "" {
		for _, v := range []string{"PGHOST", "PGHOSTADDR", "PGDATABASE", "PGSERVICE"} {
			if getenv(v) != "" {
				// pgx reads the PG* variables itself, from the process; parsed here only to
				// tell the TLS posture, and its errors are pgx's to report at connect.
				cfg, err := pgconn.ParseConfig("")
				if err != nil {
					return "", nil
				}
				return "", cfg
			}
		}
		if !c.empty["CDC_PG_URL"] {
			c.add("CDC_PG_URL", "", "not set; want a URL (postgres://user:password@host:5432/db) or key=value DSN, or libpq PG* variables such as PGHOST and PGDATABASE")
		}
		return "", nil
	}
	const want = "want a URL (postgres://user:password@host:5432/db) or key=value DSN (host=... dbname=...)"
	if m := urlSchemeRE.FindStringSubmatch(s); m != nil && m[1] != "postgres" && m[1] != "postgresql" {
		c.add("CDC_PG_URL", secret.Redact(s), "scheme %s: want postgres:// or postgresql://, or a key=value DSN (host=... dbname=...)", cut(m[1]))
		return "", nil
	}
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		_, rest, _ := strings.Cut(s, "://")
		if authority, _, _ := strings.Cut(rest, "/"); strings.Count(authority, "@") > 1 {
			// libpq ends the user info at the first '@': the rest of the password would be
			// taken for the host, and show in every connection error.
			c.add("CDC_PG_URL", secret.Redact(s), "more than one '@' before the host; percent-encode '@' in the user name or password as %%40")
			return "", nil
		}
	}
	cfg, err := pgconn.ParseConfig(s)
	if err != nil {
		reason := cutN(secret.Scrub(pgParseReason(err), s), 300) // it may quote a huge host or port
		if !isURLConn(s) && strings.Contains(reason, `missing "="`) && strings.Contains(strings.ToLower(s), "password") {
			reason += "; a value with spaces, such as a password, must be quoted: password='...'"
		}
		c.add("CDC_PG_URL", secret.Redact(s), "%s; %s", reason, want)
		return "", nil
	}
	return s, cfg
}

// urlSchemeRE is the scheme of a URL.
var urlSchemeRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// pgParseReason is pgconn's reason for rejecting a connection string, without the connection
// string itself: pgconn's redaction is best effort. The reason may still quote a part of it (a
// port, an option's value), so callers scrub it.
func pgParseReason(err error) string {
	pe, ok := errors.AsType[*pgconn.ParseConfigError](err)
	if !ok {
		return "cannot parse"
	}
	text := pe.Error() // "cannot parse `<conn>`: <msg>" or "... (<inner>)"
	inner := pe.Unwrap()
	if inner != nil {
		text = strings.TrimSuffix(text, " ("+inner.Error()+")")
	}
	reason := "cannot parse"
	if i := strings.LastIndex(text, "`: "); i >= 0 {
		reason = text[i+len("`: "):]
	}
	if urlErr, ok := errors.AsType[*url.Error](inner); ok {
		inner = urlErr.Err
	}
	if inner != nil {
		reason += ": " + inner.Error()
	}
	return reason
}

var (
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)
	slotRE  = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	topicRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

func (c *checker) identifier(name, s string) string {
	if len(s) > maxIdentLen {
		c.add(name, s, "is %d bytes; PostgreSQL's limit for names is %d bytes (NAMEDATALEN-1)", len(s), maxIdentLen)
		return ""
	}
	if !identRE.MatchString(s) {
		c.add(name, s, "want a PostgreSQL identifier: letters, digits, _ and $, not starting with a digit or $, at most 63 characters")
		return ""
	}
	return s
}

// placeholder checks the unchanged-TOAST placeholder: any non-empty UTF-8 text of at most 1,000
// bytes (it is written into every such record).
func (c *checker) placeholder(name, s string) string {
	if s == "" || len(s) > 1000 || !utf8.ValidString(s) {
		c.add(name, s, "want 1 to 1000 bytes of UTF-8 text")
		return ""
	}
	return s
}

func (c *checker) slot(s string) string {
	if len(s) > maxIdentLen {
		c.add("CDC_SLOT", s, "is %d bytes; PostgreSQL's limit for replication slot names is %d (NAMEDATALEN-1)", len(s), maxIdentLen)
		return ""
	}
	if !slotRE.MatchString(s) {
		c.add("CDC_SLOT", s, "want 1 to 63 characters from a-z, 0-9 and _ (PostgreSQL's rule for replication slot names)")
		return ""
	}
	return s
}

// topic checks a topic name, or the topic prefix with maxLen below Kafka's limit so that the
// tables' names fit after it.
func (c *checker) topic(name, s string, maxLen int) string {
	limit := fmt.Sprintf("Kafka's limit for topic names is %d", maxTopicLen)
	if maxLen < maxTopicLen {
		limit += fmt.Sprintf("; the prefix may use %d of them, to leave room for .<schema>.<table>", maxLen)
	}
	switch {
	case len(s) > maxLen:
		c.add(name, s, "is %d characters; %s", len(s), limit)
		return ""
	case !topicRE.MatchString(s) || s == "." || s == "..":
		c.add(name, s, "want 1 to %d characters from A-Z, a-z, 0-9, '.', '_' and '-' (Kafka's rule for topic names)", maxLen)
		return ""
	}
	return s
}

// tables parses CDC_TABLES; prefix ("" when invalid) is used to check that no two tables map to
// the same topic.
func (c *checker) tables(s, prefix string) []change.ExportID {
	if s == "" {
		return nil
	}
	var ids []change.ExportID
	ok := true
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		id, err := change.ParseExportID(entry)
		switch {
		case entry == "":
			c.add("CDC_TABLES", s, "empty entry; want comma-separated schema.table names")
			ok = false
		case err != nil:
			why := "want schema.table"
			if inner := errors.Unwrap(err); inner != nil {
				why = inner.Error()
			}
			c.add("CDC_TABLES", s, "table name %s: %s (entries are comma-separated schema.table names)", quoteCut(entry), why)
			ok = false
		case len(id.Schema) > maxIdentLen || len(id.Table) > maxIdentLen:
			part, n := "table", len(id.Table)
			if len(id.Schema) > maxIdentLen {
				part, n = "schema", len(id.Schema)
			}
			c.add("CDC_TABLES", s, "table name %s: the %s name is %d bytes; PostgreSQL's limit for names is %d bytes (NAMEDATALEN-1)", quoteCut(entry), part, n, maxIdentLen)
			ok = false
		case slices.Contains(ids, id):
			c.add("CDC_TABLES", s, "%s is listed twice", id)
			ok = false
		default:
			ids = append(ids, id)
		}
	}
	if !ok {
		return nil
	}
	for _, id := range ids {
		if prefix == "" {
			break
		}
		if topic := prefix + "." + id.Schema + "." + id.Table; len(topic) > maxTopicLen {
			c.add("CDC_TABLES", s, "table %s: its topic %s is %d characters; Kafka's limit for topic names is %d: shorten CDC_TOPIC_PREFIX", id, quoteCut(topic), len(topic), maxTopicLen)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	if prefix != "" {
		if err := change.CheckTopicCollisions(prefix, ids); err != nil {
			c.add("CDC_TABLES", s, "%v", err)
			return nil
		}
	}
	return ids
}

func (c *checker) brokers(s string) []string {
	if s == "" {
		return nil // reported by parseEnv: the variable is required
	}
	var out []string
	for b := range strings.SplitSeq(s, ",") {
		b = strings.TrimSpace(b)
		if !validHostPort(b, false) {
			c.add("CDC_KAFKA_BROKERS", s, "broker %s: want host:port with a port from 1 to 65535, brokers separated by commas", quoteCut(b))
			continue
		}
		out = append(out, b)
	}
	return out
}

// httpAddr checks CDC_HTTP_ADDR, or its older name CDC_METRICS_ADDR.
func (c *checker) httpAddr(s, old string) string {
	name := "CDC_HTTP_ADDR"
	switch {
	case s != "" && old != "" && s != old:
		c.add("CDC_METRICS_ADDR", old, "is the older name of CDC_HTTP_ADDR, which says %s: set one of them", quoteCut(s))
		return ""
	case s == "":
		s, name = old, "CDC_METRICS_ADDR"
	}
	if s != "" && !validHostPort(s, true) {
		c.add(name, s, "want host:port (or :port for every interface) with a port from 1 to 65535")
		return ""
	}
	return s
}

func validHostPort(s string, emptyHostOK bool) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" && !emptyHostOK || strings.ContainsAny(host, " /") {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// integer parses an integer in [lo, hi], or equal to alt when alt is not empty.
func (c *checker) integer(name, s string, lo, hi int64, alt string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err == nil && (n >= lo && n <= hi || alt != "" && s == alt) {
		return n
	}
	if alt != "" {
		c.add(name, s, "want an integer from %d to %d, or %s for the broker default", lo, hi, alt)
	} else {
		c.add(name, s, "want an integer from %d to %d", lo, hi)
	}
	return 0
}

func (c *checker) duration(name, s string, least time.Duration) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d < least {
		c.add(name, s, "want a duration of at least %v, such as 500ms, 10s or 2m", least)
		return 0
	}
	return d
}

func (c *checker) durationBetween(name, s string, least, most time.Duration) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d < least || d > most {
		c.add(name, s, "want a duration from %v to %v, such as 30s or 2m", least, most)
		return 0
	}
	return d
}

// byteUnits are the size suffixes CDC_HOLD_MEMORY accepts, longest first.
var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
}

func (c *checker) bytes(name, s string, least, most int64, bounds string) int64 {
	num, mult := s, int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult || n*mult < least || n*mult > most {
		c.add(name, s, "want a size %s: an integer number of bytes, optionally followed by KiB, MiB, GiB, KB, MB or GB", bounds)
		return 0
	}
	return n * mult
}

func oneOf[T ~string](c *checker, name, s string, allowed ...T) T {
	if slices.Contains(allowed, T(s)) {
		return T(s)
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	c.add(name, s, "want one of %s", strings.Join(names, ", "))
	return ""
}

// kafkaSecurity checks the CDC_KAFKA_TLS_* and CDC_KAFKA_SASL_* variables together, as every
// command that talks to Kafka does (sink.SecurityEnv).
func (c *checker) kafkaSecurity(e Env) sink.Security {
	tls := e.KafkaTLS
	if !c.set["CDC_KAFKA_TLS"] {
		tls = "" // the default: an explicit false with a TLS file is a contradiction, the default is not
	}
	s, problems := sink.SecurityEnv{
		TLS: tls, CAFile: e.KafkaTLSCAFile, CertFile: e.KafkaTLSCertFile, KeyFile: e.KafkaTLSKeyFile,
		ServerName: e.KafkaTLSServerName, Mechanism: e.KafkaSASLMechanism, Username: e.KafkaSASLUsername,
		Password: e.KafkaSASLPassword, Token: e.KafkaOAuthToken, TokenFile: e.KafkaOAuthFile,
	}.Security()
	for _, p := range problems {
		c.add(p.Name, p.Value, "%s", p.Msg)
	}
	return s
}
