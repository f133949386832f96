package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/envdoc"
	"github.com/tidemark/cdc/internal/posture"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
	"github.com/tidemark/cdc/pkg/kafkaconn"
	"github.com/tidemark/cdc/pkg/schemareg"
	"github.com/tidemark/cdc/pkg/secret"
)

// Env is the applier's configuration surface: one field per environment variable (tags as in
// cdc's Env: env, envDefault, helpDefault, desc). The Kafka variables are cdc's own names, so one
// environment file serves both; TLS and SASL are read by kafkaconn.ReadSecurityEnv, as cdc and
// tidemark-tail read them.
type Env struct {
	TargetURL      string `env:"APPLY_TARGET_URL,required" helpDefault:"(required)" desc:"the target PostgreSQL: URL (postgres://user:pass@host:5432/db) or key=value DSN; the password is never printed"`
	Tables         string `env:"APPLY_TABLES" helpDefault:"(required unless APPLY_ALL_TABLES=true)" desc:"comma-separated schema.table list of the tables to keep in step; not a system schema (pg_*, information_schema), not the progress table"`
	AllTables      string `env:"APPLY_ALL_TABLES" envDefault:"false" desc:"true: instead of APPLY_TABLES, keep in step every table the watermark topic names (narrowed by APPLY_SCHEMAS), including tables added to cdc's publication later"`
	Schemas        string `env:"APPLY_SCHEMAS" helpDefault:"(every schema)" desc:"with APPLY_ALL_TABLES=true: comma-separated schema names whose tables are kept in step; the others are left alone"`
	CreateTables   string `env:"APPLY_CREATE_TABLES" envDefault:"false" desc:"true: create a missing target table from the record schemas (needs CDC_VALUE_FORMAT=json-with-schema or avro on cdc); false: a missing table or column is an error"`
	TargetSchema   string `env:"APPLY_TARGET_SCHEMA" helpDefault:"(the source's schema)" desc:"schema of the target tables; by default each table keeps its source schema (not a system schema)"`
	ProgressTable  string `env:"APPLY_PROGRESS_TABLE" envDefault:"public.tidemark_apply_progress" desc:"schema.table of the progress table (created if missing): the last applied cut's position, written in the cut's transaction"`
	Name           string `env:"APPLY_NAME" envDefault:"tidemark-apply" desc:"this applier's row in the progress table; two appliers into one target need different names"`
	SkipRecords    string `env:"APPLY_SKIP_RECORDS" helpDefault:"(none)" desc:"comma-separated topic:partition:offset list of Kafka records to pass over: an error about a record's data that retrying cannot fix names the record so; list it here (and restart) to go on without it, knowing the target then lacks that change"`
	ConnectTimeout string `env:"APPLY_CONNECT_TIMEOUT" envDefault:"10s" desc:"bound of each connection attempt to the target PostgreSQL (unless APPLY_TARGET_URL sets connect_timeout) and to a Kafka broker; a server that never answers is an error after it, logged, and retried with backoff (1s to 10m)"`
	ReceiveTimeout string `env:"APPLY_RECEIVE_TIMEOUT" envDefault:"60s" desc:"the connection that applies cuts, when it hears nothing for this long while it waits for an answer, is taken as dead, dropped and reopened (a statement of a cut that runs longer, e.g. waiting for a lock, counts too); the loads' connection, whose statements may run long on purpose, finds a dead path within it by TCP keepalives instead (1s to 1h)"`
	StallAfter     string `env:"APPLY_STALL_AFTER" envDefault:"5m" desc:"/healthz answers 503 when the applier has held a cut or load part this long without applying anything while the watermarks moved past the last applied cut (10s to 24h)"`
	RequireTLS     string `env:"APPLY_REQUIRE_TLS" envDefault:"false" desc:"true: refuse to start unless the target PostgreSQL connection is encrypted and verified (sslmode=verify-full; or a Unix socket or loopback host) and Kafka uses TLS"`
	KafkaBrokers   string `env:"CDC_KAFKA_BROKERS,required" helpDefault:"(required)" desc:"Kafka bootstrap brokers, comma-separated host:port (as cdc's)"`
	TopicPrefix    string `env:"CDC_TOPIC_PREFIX" envDefault:"tidemark" desc:"cdc's topic prefix"`
	WatermarkTopic string `env:"CDC_WATERMARK_TOPIC" helpDefault:"<prefix>.__watermarks" desc:"cdc's watermark topic"`
	HTTPAddr       string `env:"APPLY_HTTP_ADDR" helpDefault:"(disabled)" desc:"host:port of /healthz and /metrics (Prometheus), e.g. 127.0.0.1:9188"`
	LogLevel       string `env:"APPLY_LOG_LEVEL" envDefault:"info" desc:"debug, info, warn or error"`
	LogFormat      string `env:"APPLY_LOG_FORMAT" envDefault:"json" desc:"json or text"`
}

// securityVars are cdc's Kafka TLS and SASL variables, read by kafkaconn.ReadSecurityEnv; help lists
// them and refers to cdc help for their meaning.
var securityVars = []string{"CDC_KAFKA_TLS", "CDC_KAFKA_TLS_CA_FILE", "CDC_KAFKA_TLS_CERT_FILE",
	"CDC_KAFKA_TLS_KEY_FILE", "CDC_KAFKA_TLS_SERVER_NAME", "CDC_KAFKA_SASL_MECHANISM",
	"CDC_KAFKA_SASL_USERNAME", "CDC_KAFKA_SASL_PASSWORD", "CDC_KAFKA_SASL_OAUTH_TOKEN",
	"CDC_KAFKA_SASL_OAUTH_TOKEN_FILE"}

// registryVars are cdc's schema registry variables, read by schemareg.ReadEnv: the registry that
// Avro records (CDC_VALUE_FORMAT=avro) name their schemas in.
var registryVars = []string{"CDC_SCHEMA_REGISTRY_URL", "CDC_SCHEMA_REGISTRY_USERNAME", "CDC_SCHEMA_REGISTRY_PASSWORD",
	"CDC_SCHEMA_REGISTRY_TLS_CA_FILE", "CDC_SCHEMA_REGISTRY_TLS_CERT_FILE", "CDC_SCHEMA_REGISTRY_TLS_KEY_FILE",
	"CDC_SCHEMA_REGISTRY_TLS_SERVER_NAME"}

// config is the validated configuration.
type config struct {
	targetURL string
	// tables are the chosen tables (APPLY_TABLES); with allTables (APPLY_ALL_TABLES=true) it is
	// empty and every table the watermark topic names is chosen, narrowed to schemas when set.
	tables       []change.ExportID
	allTables    bool
	schemas      []string
	createTables bool
	targetSchema string
	progress     pgx.Identifier
	name         string
	// skip are the records to pass over (APPLY_SKIP_RECORDS).
	skip           map[recordRef]bool
	connectTimeout time.Duration
	receiveTimeout time.Duration
	stallAfter     time.Duration
	// postures say how the target and Kafka connections are protected: logged at start; with
	// APPLY_REQUIRE_TLS=true one that posture.Refused refuses was a configuration problem.
	postures       []posture.Posture
	brokers        []string
	topicPrefix    string
	watermarkTopic string
	security       kafkaconn.Security
	// registry is the schema registry of Avro records; URL "" when none is set.
	registry  schemareg.Config
	httpAddr  string
	logLevel  slog.Level
	logFormat string
}

// LogValue logs the configuration with the target's password redacted.
func (c config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("target_url", secret.Redact(c.targetURL)),
		slog.Any("tables", c.tables),
		slog.Bool("all_tables", c.allTables),
		slog.Any("schemas", c.schemas),
		slog.Bool("create_tables", c.createTables),
		slog.String("progress_table", c.progress.Sanitize()),
		slog.String("name", c.name),
		slog.Int("skip_records", len(c.skip)),
		slog.Duration("connect_timeout", c.connectTimeout),
		slog.Duration("receive_timeout", c.receiveTimeout),
		slog.Duration("stall_after", c.stallAfter),
		slog.Any("brokers", c.brokers),
		slog.String("watermark_topic", c.watermarkTopic),
		slog.Bool("kafka_tls", c.security.TLS),
		slog.String("kafka_sasl_mechanism", c.security.SASLMechanism),
		slog.String("http_addr", c.httpAddr),
	)
}

// configError lists every configuration problem; main exits with code 2 on it.
type configError struct{ problems []error }

func (e *configError) Error() string   { return errors.Join(e.problems...).Error() }
func (e *configError) Unwrap() []error { return e.problems }

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// loadConfig reads and checks the environment through getenv; on any problem it returns a
// *configError naming every one. No problem quotes a secret: the target URL is shown redacted.
// An APPLY_* variable in environ that Env does not declare is a problem too: a misspelt
// variable silently ignored would leave its default in force.
func loadConfig(getenv func(string) string, environ []string) (config, error) {
	var problems []error
	add := func(name, value, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if value == "" {
			problems = append(problems, fmt.Errorf("%s: %s", name, msg))
		} else {
			problems = append(problems, fmt.Errorf("%s=%q: %s", name, value, msg))
		}
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "APPLY_") && !declared(name) {
			add(name, "", "unknown variable (see tidemark-apply help)")
		}
	}
	vars := make(map[string]string)
	for _, v := range envVars() {
		if val := strings.TrimSpace(getenv(v.Name)); val != "" {
			vars[v.Name] = val
		}
	}
	var e Env
	if err := env.ParseWithOptions(&e, env.Options{Environment: vars}); err != nil {
		for _, err := range unwrapAll(err) {
			if notSet, ok := errors.AsType[env.VarIsNotSetError](err); ok {
				add(notSet.Key, "", "required but not set; want %s", describe(notSet.Key))
				continue
			}
			problems = append(problems, fmt.Errorf("read environment: %w", err))
		}
	}
	c := config{name: e.Name, topicPrefix: e.TopicPrefix, watermarkTopic: e.WatermarkTopic, httpAddr: e.HTTPAddr}
	boolean := func(name, value string) bool {
		switch strings.ToLower(value) {
		case "true", "1", "yes":
			return true
		case "false", "0", "no":
		default:
			add(name, value, "want true or false")
		}
		return false
	}
	duration := func(name, value string, least, most time.Duration) time.Duration {
		d, err := time.ParseDuration(value)
		if err != nil || d < least || d > most {
			add(name, value, "want a duration from %v to %v, such as 30s or 2m", least, most)
			return 0
		}
		return d
	}
	var target *pgx.ConnConfig
	if e.TargetURL != "" {
		if pc, err := pgx.ParseConfig(e.TargetURL); err != nil {
			add("APPLY_TARGET_URL", secret.Redact(e.TargetURL), "not a PostgreSQL connection string: %s", secret.Scrub(err.Error(), e.TargetURL))
		} else {
			c.targetURL, target = e.TargetURL, pc
		}
	}
	badTables := false
	for t := range strings.SplitSeq(e.Tables, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		schema, table, ok := strings.Cut(t, ".")
		if !ok || schema == "" || table == "" || strings.Contains(table, ".") {
			add("APPLY_TABLES", t, "want schema.table")
			badTables = true
			continue
		}
		if systemSchema(schema) {
			add("APPLY_TABLES", t, "%s is a system schema: its tables are PostgreSQL's own, never applied", schema)
			badTables = true
			continue
		}
		id := change.ExportID{Schema: schema, Table: table}
		if !slices.Contains(c.tables, id) {
			c.tables = append(c.tables, id)
		}
	}
	c.allTables = boolean("APPLY_ALL_TABLES", e.AllTables)
	switch {
	case c.allTables && e.Tables != "":
		add("APPLY_TABLES", e.Tables, "set together with APPLY_ALL_TABLES=true: list the tables, or choose every table, not both")
	case !c.allTables && len(c.tables) == 0 && !badTables:
		add("APPLY_TABLES", "", "required: a comma-separated schema.table list of the tables to keep in step; or set APPLY_ALL_TABLES=true to keep every table the watermark topic names")
	}
	for sc := range strings.SplitSeq(e.Schemas, ",") {
		switch sc = strings.TrimSpace(sc); {
		case sc == "":
		case strings.Contains(sc, "."):
			add("APPLY_SCHEMAS", sc, "want a schema name, without a table")
		case systemSchema(sc):
			add("APPLY_SCHEMAS", sc, "a system schema: its tables are PostgreSQL's own, never applied")
		case !slices.Contains(c.schemas, sc):
			c.schemas = append(c.schemas, sc)
		}
	}
	if e.Schemas != "" && !c.allTables {
		add("APPLY_SCHEMAS", e.Schemas, "narrows APPLY_ALL_TABLES=true only; with APPLY_TABLES, list just the tables wanted")
	}
	c.createTables = boolean("APPLY_CREATE_TABLES", e.CreateTables)
	if e.TargetSchema != "" {
		switch {
		case !identRE.MatchString(e.TargetSchema):
			add("APPLY_TARGET_SCHEMA", e.TargetSchema, "want a plain identifier (letters, digits, _; at most 63)")
		case systemSchema(e.TargetSchema):
			add("APPLY_TARGET_SCHEMA", e.TargetSchema, "a system schema: the applier never writes into PostgreSQL's own schemas")
		}
		c.targetSchema = e.TargetSchema
	}
	switch schema, table, ok := strings.Cut(e.ProgressTable, "."); {
	case !ok || !identRE.MatchString(schema) || !identRE.MatchString(table):
		add("APPLY_PROGRESS_TABLE", e.ProgressTable, "want schema.table of plain identifiers (letters, digits, _)")
	case systemSchema(schema):
		add("APPLY_PROGRESS_TABLE", e.ProgressTable, "%s is a system schema: the applier never writes into PostgreSQL's own schemas", schema)
	default:
		c.progress = pgx.Identifier{schema, table}
		for _, t := range c.tables {
			if c.targetOf(t) == c.progress.Sanitize() {
				add("APPLY_TABLES", t.String(), "is applied to %s, the progress table (APPLY_PROGRESS_TABLE): choose another progress table, or leave the table out", c.progress.Sanitize())
			}
		}
	}
	if skip, errs := parseRecordRefs(e.SkipRecords); len(errs) > 0 {
		for _, err := range errs {
			problems = append(problems, fmt.Errorf("APPLY_SKIP_RECORDS: %w", err))
		}
	} else {
		c.skip = skip
	}
	c.connectTimeout = duration("APPLY_CONNECT_TIMEOUT", e.ConnectTimeout, time.Second, 10*time.Minute)
	c.receiveTimeout = duration("APPLY_RECEIVE_TIMEOUT", e.ReceiveTimeout, time.Second, time.Hour)
	c.stallAfter = duration("APPLY_STALL_AFTER", e.StallAfter, 10*time.Second, 24*time.Hour)
	requireTLS := boolean("APPLY_REQUIRE_TLS", e.RequireTLS)
	if len(c.name) > 200 {
		add("APPLY_NAME", c.name[:40]+"…", "at most 200 bytes")
	}
	for b := range strings.SplitSeq(e.KafkaBrokers, ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(b); err != nil {
			add("CDC_KAFKA_BROKERS", b, "want host:port")
			continue
		}
		c.brokers = append(c.brokers, b)
	}
	if c.watermarkTopic == "" {
		c.watermarkTopic = c.topicPrefix + ".__watermarks"
	}
	if c.httpAddr != "" {
		if _, _, err := net.SplitHostPort(c.httpAddr); err != nil {
			add("APPLY_HTTP_ADDR", c.httpAddr, "want host:port")
		}
	}
	switch strings.ToLower(e.LogLevel) {
	case "debug":
		c.logLevel = slog.LevelDebug
	case "info":
	case "warn":
		c.logLevel = slog.LevelWarn
	case "error":
		c.logLevel = slog.LevelError
	default:
		add("APPLY_LOG_LEVEL", e.LogLevel, "want debug, info, warn or error")
	}
	switch c.logFormat = strings.ToLower(e.LogFormat); c.logFormat {
	case "json", "text":
	default:
		add("APPLY_LOG_FORMAT", e.LogFormat, "want json or text")
	}
	sec, secProblems := kafkaconn.ReadSecurityEnv(getenv).Security()
	for _, p := range secProblems {
		problems = append(problems, p)
	}
	c.security = sec
	reg, regProblems := schemareg.ReadEnv(getenv).Config()
	for _, p := range regProblems {
		problems = append(problems, p)
	}
	c.registry = reg
	if target != nil {
		c.postures = append(c.postures, targetPosture(&target.Config))
	}
	c.postures = append(c.postures, posture.Kafka(sec))
	if requireTLS {
		for _, p := range c.postures {
			if why := posture.Refused(p, "APPLY_REQUIRE_TLS"); why != "" {
				add(p.Var, "", "%s", why)
			}
		}
	}
	if len(problems) > 0 {

		return config{}, &configError{problems: problems}
	}
	return c, nil
}

// systemSchema reports whether s is one of PostgreSQL's own schemas: pg_catalog, pg_toast,
// information_schema, or any other name beginning with pg_ (which PostgreSQL reserves: the
// temporary schemas pg_temp_N and pg_toast_temp_N among them). Names are compared as they are
// written: "PG_Data", created quoted, is a user's schema.
func systemSchema(s string) bool { return consumer.SystemSchema(s) }

// accepts narrows APPLY_ALL_TABLES to APPLY_SCHEMAS (every schema when it is empty); with
// APPLY_TABLES the reader takes the tables listed. A table in a system schema is not narrowed
// away here: the reader refuses its record as one no cdc writes.
func (c config) accepts(e change.ExportID) bool {
	return len(c.schemas) == 0 || slices.Contains(c.schemas, e.Schema) || consumer.SystemSchema(e.Schema)
}

// targetOf is the quoted name of the target table that the source table t is applied to.
func (c config) targetOf(t change.ExportID) string {
	schema := t.Schema
	if c.targetSchema != "" {
		schema = c.targetSchema
	}
	return pgx.Identifier{schema, t.Table}.Sanitize()
}

func unwrapAll(err error) []error {
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		return multi.Unwrap()
	}
	return []error{err}
}

// envVars lists the variables of Env in declaration order.
func envVars() []envdoc.Var { return envdoc.Vars[Env]() }

// declared reports whether Env declares the variable name.
func declared(name string) bool {
	_, ok := envdoc.Find(envVars(), name)
	return ok
}

func describe(name string) string {
	if v, ok := envdoc.Find(envVars(), name); ok {
		return v.Desc
	}
	return "see `tidemark-apply help`"
}

const usage = `Usage: tidemark-apply [run|help]

tidemark-apply keeps a target PostgreSQL in step with tables that cdc publishes to Kafka. It
applies each consistent cut of the chosen tables in one target transaction that also records the
cut's position in a progress table, so the target never shows part of a source transaction and a
restart neither applies a change twice nor skips one.

Commands:
  run    apply cuts until stopped (the default)
  help   print this text

Configuration is read from environment variables only:
`

// writeHelp writes the text of `tidemark-apply help`.
func writeHelp(w io.Writer) {
	fmt.Fprint(w, usage)
	fmt.Fprintln(w)
	envdoc.WriteTable(w, envVars())
	fmt.Fprintf(w, "\nKafka TLS and SASL: %s, as cdc reads them (see cdc help).\n", strings.Join(securityVars, ", "))
	fmt.Fprintf(w, "Schema registry of Avro records (CDC_VALUE_FORMAT=avro): %s, as cdc reads them.\n", strings.Join(registryVars, ", "))
	fmt.Fprintln(w, "Unknown APPLY_* variables are an error.")
}
