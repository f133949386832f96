package main

import (
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

const testPassword = "s3cr3t-pw"

// validEnv is the smallest valid environment.
func validEnv() map[string]string {
	return map[string]string{
		"CDC_PG_URL":        "postgres://cdc:" + testPassword + "@db.example:5432/app",
		"CDC_KAFKA_BROKERS": "kafka-1:9092, kafka-2:9092",
	}
}

// with returns base with the overrides applied; an empty value removes the variable.
func with(base, overrides map[string]string) map[string]string {
	m := maps.Clone(base)
	for k, v := range overrides {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

// load runs LoadConfig on m as the whole process environment.
func load(tb testing.TB, m map[string]string) (Settings, error) {
	tb.Helper()
	var environ []string
	for k, v := range m {
		environ = append(environ, k+"="+v)
	}
	return LoadConfig(func(k string) string { return m[k] }, environ)
}

// problemVars returns the variable named by each problem of err, which must be a *ConfigError.
func problemVars(tb testing.TB, err error) []string {
	tb.Helper()
	ce, ok := errors.AsType[*ConfigError](err)
	if !ok {
		tb.Fatalf("error %v (%T) is not a *ConfigError", err, err)
	}
	var names []string
	for _, p := range ce.Problems {
		ve, ok := errors.AsType[*varError](p)
		if !ok {
			tb.Fatalf("problem %q (%T) names no variable", p, p)
		}
		names = append(names, ve.Name)
	}
	return names
}

func TestLoadConfigDefaults(t *testing.T) {
	s, err := load(t, validEnv())
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	want := pipeline.Config{
		PGURL:       validEnv()["CDC_PG_URL"],
		Publication: "tidemark",
		Slot:        "tidemark",
		Sink: sink.Config{
			Brokers:            []string{"kafka-1:9092", "kafka-2:9092"},
			Partitions:         1,
			ReplicationFactor:  -1,
			WatermarkTopic:     "tidemark.__watermarks",
			Delivery:           sink.ExactlyOnce,
			TransactionTimeout: time.Minute,
			Compression:        "lz4",
		},
		TopicPrefix:          "tidemark",
		SnapshotStrategy:     snapshot.StrategyChunked,
		UnchangedToast:       codec.UnchangedOmit,
		UnchangedPlaceholder: "__debezium_unavailable_value",
		ValueFormat:          codec.FormatJSON,
		Snapshot:             snapshot.Config{Workers: 4, SlotWaitTimeout: 5 * time.Minute},
		Replication: replication.Config{HoldMemory: 64 << 20, SpillDir: filepath.Join(os.TempDir(), "tidemark-spill"), PieceBytes: 4 << 20,
			Encoders: min(runtime.GOMAXPROCS(0)-1, 4)},
		Watermark:               watermark.Options{Mode: watermark.ModeIndependent, Interval: time.Second},
		PublicationPollInterval: 5 * time.Second,
		ConnectTimeout:          10 * time.Second,
		ReceiveTimeout:          time.Minute,
		ShutdownTimeout:         20 * time.Second,
	}
	if !reflect.DeepEqual(s.Pipeline, want) {
		t.Errorf("pipeline config:\n got %+v\nwant %+v", s.Pipeline, want)
	}
	if s.MemoryLimit != 200<<20 {
		t.Errorf("memory limit %d, want 200 MiB", s.MemoryLimit)
	}
	if s.LogLevel != slog.LevelInfo || s.LogFormat != "json" {
		t.Errorf("log: got %v %q, want INFO json", s.LogLevel, s.LogFormat)
	}
}

func TestLoadConfigAllSet(t *testing.T) {
	m := with(validEnv(), map[string]string{
		"CDC_PUBLICATION":                  "shop_pub",
		"CDC_TABLES":                       "public.orders, inventory.items,customers",
		"CDC_SLOT":                         "shop_slot_1",
		"CDC_TOPIC_PREFIX":                 "shop-cdc",
		"CDC_TOPIC_PARTITIONS":             "12",
		"CDC_TOPIC_REPLICATION_FACTOR":     "-1",
		"CDC_WATERMARK_TOPIC":              "marks",
		"CDC_DELIVERY":                     "exactly-once",
		"CDC_KAFKA_TRANSACTION_TIMEOUT":    "90s",
		"CDC_SNAPSHOT_WORKERS":             "64",
		"CDC_SNAPSHOT_STRATEGY":            "chunked",
		"CDC_SNAPSHOT_MAX_ROWS_PER_SECOND": "50000",
		"CDC_SNAPSHOT_CHUNK_ROWS":          "5000",
		"CDC_WATERMARK_MODE":               "global",
		"CDC_VALUE_FORMAT":                 "json-with-schema",
		"CDC_WATERMARK_INTERVAL":           "10ms",
		"CDC_PUBLICATION_POLL_INTERVAL":    "2m",
		"CDC_HOLD_MEMORY":                  "2 GiB",
		"CDC_SPILL_DIR":                    "/var/spill",
		"CDC_UNCHANGED_TOAST":              "placeholder",
		"CDC_KAFKA_COMPRESSION":            "zstd",
		"CDC_UNCHANGED_TOAST_PLACEHOLDER":  "n/a",
		"CDC_TXN_PIECE_SIZE":               "256KiB",
		"CDC_STREAM_ENCODERS":              "3",
		"CDC_SLOT_WAIT_TIMEOUT":            "30s",
		"CDC_CONNECT_TIMEOUT":              "3s",
		"CDC_RECEIVE_TIMEOUT":              "15s",
		"CDC_SHUTDOWN_TIMEOUT":             "25s",
		"CDC_HTTP_ADDR":                    ":9187",
		"CDC_LOG_LEVEL":                    "debug",
		"CDC_LOG_FORMAT":                   "text",
	})
	s, err := load(t, m)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	want := pipeline.Config{
		PGURL:       m["CDC_PG_URL"],
		Publication: "shop_pub",
		Tables: []change.ExportID{
			{Schema: "public", Table: "orders"},
			{Schema: "inventory", Table: "items"},
			{Schema: "public", Table: "customers"},
		},
		Slot: "shop_slot_1",
		Sink: sink.Config{
			Brokers:            []string{"kafka-1:9092", "kafka-2:9092"},
			Partitions:         12,
			ReplicationFactor:  -1,
			WatermarkTopic:     "marks",
			Delivery:           sink.ExactlyOnce,
			TransactionTimeout: 90 * time.Second,
			Compression:        "zstd",
		},
		TopicPrefix:              "shop-cdc",
		SnapshotStrategy:         snapshot.StrategyChunked,
		SnapshotMaxRowsPerSecond: 50000,
		UnchangedToast:           codec.UnchangedPlaceholder,
		UnchangedPlaceholder:     "n/a",
		ValueFormat:              codec.FormatJSONWithSchema,
		Snapshot:                 snapshot.Config{Workers: 64, ChunkRows: 5000, SlotWaitTimeout: 30 * time.Second},
		Replication:              replication.Config{HoldMemory: 2 << 30, SpillDir: "/var/spill", PieceBytes: 256 << 10, Encoders: 3},
		Watermark:                watermark.Options{Mode: watermark.ModeGlobal, Interval: 10 * time.Millisecond},
		PublicationPollInterval:  2 * time.Minute,
		ConnectTimeout:           3 * time.Second,
		ReceiveTimeout:           15 * time.Second,
		ShutdownTimeout:          25 * time.Second,
		HTTPAddr:                 ":9187",
	}
	if !reflect.DeepEqual(s.Pipeline, want) {
		t.Errorf("pipeline config:\n got %+v\nwant %+v", s.Pipeline, want)
	}
	if s.LogLevel != slog.LevelDebug || s.LogFormat != "text" {
		t.Errorf("log: got %v %q, want DEBUG text", s.LogLevel, s.LogFormat)
	}
}

func TestLoadConfigPGVariablesOnly(t *testing.T) {
	for _, v := range []string{"PGHOST", "PGDATABASE", "PGSERVICE"} {
		t.Run(v, func(t *testing.T) {
			s, err := load(t, with(validEnv(), map[string]string{"CDC_PG_URL": "", v: "x"}))
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if s.Pipeline.PGURL != "" {
				t.Errorf("PGURL = %q, want empty so that pgx uses the PG* variables", s.Pipeline.PGURL)
			}
		})
	}
}

func TestLoadConfigKeyValueDSN(t *testing.T) {
	dsn := "host=db port=5432 dbname=app user=cdc password=" + testPassword
	s, err := load(t, with(validEnv(), map[string]string{"CDC_PG_URL": dsn}))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if s.Pipeline.PGURL != dsn {
		t.Errorf("PGURL = %q, want %q", s.Pipeline.PGURL, dsn)
	}
}

func TestLoadConfigHoldMemory(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"1048576", 1 << 20},
		{"1MiB", 1 << 20},
		{"3 KiB", 0}, // below 1MiB
		{"5MB", 5_000_000},
		{"1GB", 1_000_000_000},
		{"2GiB", 2 << 30},
		{"100000KB", 100_000_000},
		{"2097152B", 2 << 20},
		{"1.5GiB", 0},
		{"64mb", 0},
		{"-64MiB", 0},
		{"99999999999GiB", 0}, // overflows int64
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			s, err := load(t, with(validEnv(), map[string]string{"CDC_HOLD_MEMORY": tt.in}))
			if tt.want == 0 {
				if got := problemVars(t, err); !slices.Equal(got, []string{"CDC_HOLD_MEMORY"}) {
					t.Fatalf("problems with %v, want only CDC_HOLD_MEMORY", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if s.Pipeline.Replication.HoldMemory != tt.want {
				t.Errorf("HoldMemory = %d, want %d", s.Pipeline.Replication.HoldMemory, tt.want)
			}
		})
	}
}

func TestLoadConfigTxnPieceSize(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"64KiB", 64 << 10},
		{"4MiB", 4 << 20},
		{"64MiB", 64 << 20},
		{"63KiB", 0}, // below 64KiB
		{"65MiB", 0}, // above 64MiB
		{"1GiB", 0},
		{"four", 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			s, err := load(t, with(validEnv(), map[string]string{"CDC_TXN_PIECE_SIZE": tt.in}))
			if tt.want == 0 {
				if got := problemVars(t, err); !slices.Equal(got, []string{"CDC_TXN_PIECE_SIZE"}) {
					t.Fatalf("problems with %v, want only CDC_TXN_PIECE_SIZE", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if s.Pipeline.Replication.PieceBytes != tt.want {
				t.Errorf("PieceBytes = %d, want %d", s.Pipeline.Replication.PieceBytes, tt.want)
			}
		})
	}
}

// TestStreamEncoders: CDC_STREAM_ENCODERS from 0 to 16; unset, one per P besides the stream
// goroutine's, at most 4.
func TestStreamEncoders(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int // -1: refused
	}{{"0", 0}, {"2", 2}, {"16", 16}, {"17", -1}, {"-1", -1}, {"two", -1}} {
		t.Run(tt.in, func(t *testing.T) {
			s, err := load(t, with(validEnv(), map[string]string{"CDC_STREAM_ENCODERS": tt.in}))
			if tt.want < 0 {
				if got := problemVars(t, err); !slices.Equal(got, []string{"CDC_STREAM_ENCODERS"}) {
					t.Fatalf("problems with %v, want only CDC_STREAM_ENCODERS", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if got := s.Pipeline.Replication.Encoders; got != tt.want {
				t.Errorf("Encoders = %d, want %d", got, tt.want)
			}
		})
	}
	for procs, want := range map[int]int{1: 0, 2: 1, 5: 4, 16: 4} {
		if got := streamEncodersFor(procs); got != want {
			t.Errorf("default with GOMAXPROCS=%d: %d encoders, want %d", procs, got, want)
		}
	}
}

func TestLoadConfigInvalid(t *testing.T) {
	tests := []struct {
		name string
		set  map[string]string // applied to validEnv; "" removes
		want []string          // the variables reported, in order
	}{
		{"missing broker", map[string]string{"CDC_KAFKA_BROKERS": ""}, []string{"CDC_KAFKA_BROKERS"}},
		{"broker without port", map[string]string{"CDC_KAFKA_BROKERS": "kafka"}, []string{"CDC_KAFKA_BROKERS"}},
		{"broker port not numeric", map[string]string{"CDC_KAFKA_BROKERS": "kafka:http"}, []string{"CDC_KAFKA_BROKERS"}},
		{"broker port out of range", map[string]string{"CDC_KAFKA_BROKERS": "kafka:99999"}, []string{"CDC_KAFKA_BROKERS"}},
		{"broker without host", map[string]string{"CDC_KAFKA_BROKERS": ":9092"}, []string{"CDC_KAFKA_BROKERS"}},
		{"empty broker entry", map[string]string{"CDC_KAFKA_BROKERS": "a:1,,b:2"}, []string{"CDC_KAFKA_BROKERS"}},
		{"two bad brokers", map[string]string{"CDC_KAFKA_BROKERS": "a,b:2,c"}, []string{"CDC_KAFKA_BROKERS", "CDC_KAFKA_BROKERS"}},
		{"missing PG URL and PG vars", map[string]string{"CDC_PG_URL": ""}, []string{"CDC_PG_URL"}},
		{"PG URL unparseable", map[string]string{"CDC_PG_URL": "postgres://cdc@db:notaport/app"}, []string{"CDC_PG_URL"}},
		{"PG DSN unparseable", map[string]string{"CDC_PG_URL": "just-a-hostname"}, []string{"CDC_PG_URL"}},
		{"slot upper case", map[string]string{"CDC_SLOT": "Tidemark"}, []string{"CDC_SLOT"}},
		{"memory limit too small", map[string]string{"CDC_MEMORY_LIMIT": "10MiB"}, []string{"CDC_MEMORY_LIMIT"}},
		{"unknown compression", map[string]string{"CDC_KAFKA_COMPRESSION": "brotli"}, []string{"CDC_KAFKA_COMPRESSION"}},
		{"unknown unchanged TOAST policy", map[string]string{"CDC_UNCHANGED_TOAST": "null"}, []string{"CDC_UNCHANGED_TOAST"}},
		{"placeholder too long", map[string]string{"CDC_UNCHANGED_TOAST": "placeholder", "CDC_UNCHANGED_TOAST_PLACEHOLDER": strings.Repeat("x", 1001)}, []string{"CDC_UNCHANGED_TOAST_PLACEHOLDER"}},
		{"slot with dash", map[string]string{"CDC_SLOT": "tide-mark"}, []string{"CDC_SLOT"}},
		{"slot too long", map[string]string{"CDC_SLOT": strings.Repeat("s", 64)}, []string{"CDC_SLOT"}},
		{"publication with space", map[string]string{"CDC_PUBLICATION": "my pub"}, []string{"CDC_PUBLICATION"}},
		{"publication starting with digit", map[string]string{"CDC_PUBLICATION": "1pub"}, []string{"CDC_PUBLICATION"}},
		{"topic prefix illegal char", map[string]string{"CDC_TOPIC_PREFIX": "tide/mark"}, []string{"CDC_TOPIC_PREFIX"}},
		{"topic prefix too long", map[string]string{"CDC_TOPIC_PREFIX": strings.Repeat("t", 201)}, []string{"CDC_TOPIC_PREFIX"}},
		{"watermark topic illegal", map[string]string{"CDC_WATERMARK_TOPIC": "marks!"}, []string{"CDC_WATERMARK_TOPIC"}},
		{"partitions not numeric", map[string]string{"CDC_TOPIC_PARTITIONS": "many"}, []string{"CDC_TOPIC_PARTITIONS"}},
		{"partitions zero", map[string]string{"CDC_TOPIC_PARTITIONS": "0"}, []string{"CDC_TOPIC_PARTITIONS"}},
		{"partitions too many", map[string]string{"CDC_TOPIC_PARTITIONS": "10001"}, []string{"CDC_TOPIC_PARTITIONS"}},
		{"replication factor zero", map[string]string{"CDC_TOPIC_REPLICATION_FACTOR": "0"}, []string{"CDC_TOPIC_REPLICATION_FACTOR"}},
		{"replication factor -2", map[string]string{"CDC_TOPIC_REPLICATION_FACTOR": "-2"}, []string{"CDC_TOPIC_REPLICATION_FACTOR"}},
		{"replication factor over int16", map[string]string{"CDC_TOPIC_REPLICATION_FACTOR": "32768"}, []string{"CDC_TOPIC_REPLICATION_FACTOR"}},
		{"workers not numeric", map[string]string{"CDC_SNAPSHOT_WORKERS": "4x"}, []string{"CDC_SNAPSHOT_WORKERS"}},
		{"workers out of range", map[string]string{"CDC_SNAPSHOT_WORKERS": "65"}, []string{"CDC_SNAPSHOT_WORKERS"}},
		{"watermark interval without unit", map[string]string{"CDC_WATERMARK_INTERVAL": "5"}, []string{"CDC_WATERMARK_INTERVAL"}},
		{"watermark interval too short", map[string]string{"CDC_WATERMARK_INTERVAL": "9ms"}, []string{"CDC_WATERMARK_INTERVAL"}},
		{"poll interval too short", map[string]string{"CDC_PUBLICATION_POLL_INTERVAL": "99ms"}, []string{"CDC_PUBLICATION_POLL_INTERVAL"}},
		{"slot wait timeout garbage", map[string]string{"CDC_SLOT_WAIT_TIMEOUT": "forever"}, []string{"CDC_SLOT_WAIT_TIMEOUT"}},
		{"slot wait timeout negative", map[string]string{"CDC_SLOT_WAIT_TIMEOUT": "-1m"}, []string{"CDC_SLOT_WAIT_TIMEOUT"}},
		{"connect timeout zero", map[string]string{"CDC_CONNECT_TIMEOUT": "0s"}, []string{"CDC_CONNECT_TIMEOUT"}},
		{"receive timeout garbage", map[string]string{"CDC_RECEIVE_TIMEOUT": "soon"}, []string{"CDC_RECEIVE_TIMEOUT"}},
		{"shutdown timeout too long", map[string]string{"CDC_SHUTDOWN_TIMEOUT": "1h"}, []string{"CDC_SHUTDOWN_TIMEOUT"}},
		{"hold memory garbage", map[string]string{"CDC_HOLD_MEMORY": "lots"}, []string{"CDC_HOLD_MEMORY"}},
		{"delivery unknown", map[string]string{"CDC_DELIVERY": "exactly_once"}, []string{"CDC_DELIVERY"}},
		{"watermark mode unknown", map[string]string{"CDC_WATERMARK_MODE": "local"}, []string{"CDC_WATERMARK_MODE"}},
		{"value format unknown", map[string]string{"CDC_VALUE_FORMAT": "protobuf"}, []string{"CDC_VALUE_FORMAT"}},
		{"avro without a registry", map[string]string{"CDC_VALUE_FORMAT": "avro"}, []string{"CDC_SCHEMA_REGISTRY_URL"}},
		{"log level unknown", map[string]string{"CDC_LOG_LEVEL": "verbose"}, []string{"CDC_LOG_LEVEL"}},
		{"log format unknown", map[string]string{"CDC_LOG_FORMAT": "xml"}, []string{"CDC_LOG_FORMAT"}},
		{"metrics addr without port", map[string]string{"CDC_METRICS_ADDR": "localhost"}, []string{"CDC_METRICS_ADDR"}},
		{"http addr without port", map[string]string{"CDC_HTTP_ADDR": "localhost"}, []string{"CDC_HTTP_ADDR"}},
		{"http addr under both names", map[string]string{"CDC_HTTP_ADDR": ":1", "CDC_METRICS_ADDR": ":2"}, []string{"CDC_METRICS_ADDR"}},
		{"unknown snapshot strategy", map[string]string{"CDC_SNAPSHOT_STRATEGY": "fast"}, []string{"CDC_SNAPSHOT_STRATEGY"}},
		{"SCRAM without credentials", map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512"}, []string{"CDC_KAFKA_SASL_USERNAME", "CDC_KAFKA_SASL_PASSWORD"}},
		{"unknown SASL mechanism", map[string]string{"CDC_KAFKA_SASL_MECHANISM": "GSSAPI"}, []string{"CDC_KAFKA_SASL_MECHANISM"}},
		{"credentials without a mechanism", map[string]string{"CDC_KAFKA_SASL_PASSWORD": "x"}, []string{"CDC_KAFKA_SASL_MECHANISM"}},
		{"OAUTHBEARER without a token", map[string]string{"CDC_KAFKA_SASL_MECHANISM": "OAUTHBEARER"}, []string{"CDC_KAFKA_SASL_OAUTH_TOKEN"}},
		{"missing CA file", map[string]string{"CDC_KAFKA_TLS_CA_FILE": "/nonexistent/ca.pem"}, []string{"CDC_KAFKA_TLS_CA_FILE"}},
		{"certificate without key", map[string]string{"CDC_KAFKA_TLS_CERT_FILE": "/etc/hostname"}, []string{"CDC_KAFKA_TLS_CERT_FILE"}},
		{"TLS not a boolean", map[string]string{"CDC_KAFKA_TLS": "maybe"}, []string{"CDC_KAFKA_TLS"}},
		{"negative row cap", map[string]string{"CDC_SNAPSHOT_MAX_ROWS_PER_SECOND": "-1"}, []string{"CDC_SNAPSHOT_MAX_ROWS_PER_SECOND"}},
		{"table with three parts", map[string]string{"CDC_TABLES": "db.public.orders"}, []string{"CDC_TABLES"}},
		{"table with space", map[string]string{"CDC_TABLES": "public.my orders"}, []string{"CDC_TABLES"}},
		{"empty table entry", map[string]string{"CDC_TABLES": "public.a,"}, []string{"CDC_TABLES"}},
		{"duplicate tables", map[string]string{"CDC_TABLES": "public.orders,orders"}, []string{"CDC_TABLES"}},
		{"tables colliding topics", map[string]string{"CDC_TABLES": `public."a b",public.a_b`}, []string{"CDC_TABLES"}},
		{"unknown CDC variable", map[string]string{"CDC_SLOTT": "x"}, []string{"CDC_SLOTT"}},
		{"registry URL with user info", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://u:p@registry"}, []string{"CDC_SCHEMA_REGISTRY_URL"}},
		{"registry user without URL", map[string]string{"CDC_SCHEMA_REGISTRY_USERNAME": "u"}, []string{"CDC_SCHEMA_REGISTRY_USERNAME"}},
		{"registry password without user", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://registry", "CDC_SCHEMA_REGISTRY_PASSWORD": "p"}, []string{"CDC_SCHEMA_REGISTRY_USERNAME"}},
		{"registry CA file on http", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "http://registry", "CDC_SCHEMA_REGISTRY_TLS_CA_FILE": "/etc/hostname"}, []string{"CDC_SCHEMA_REGISTRY_URL"}},
		{"registry over http with TLS required", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "http://registry:8081", "CDC_REQUIRE_TLS": "true",
			"CDC_PG_URL": "postgres://cdc@db/app?sslmode=verify-full", "CDC_KAFKA_TLS": "true"}, []string{"CDC_SCHEMA_REGISTRY_URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, with(validEnv(), tt.set))
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			if got := problemVars(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("problems with %v, want %v; error:\n%v", got, tt.want, err)
			}
		})
	}
}

func TestLoadConfigProblemText(t *testing.T) {
	tests := []struct {
		name string
		set  map[string]string
		want []string // substrings of the error text
	}{
		{"range", map[string]string{"CDC_SNAPSHOT_WORKERS": "0"}, []string{`CDC_SNAPSHOT_WORKERS="0": want an integer from 1 to 64`}},
		{"enum", map[string]string{"CDC_DELIVERY": "once"}, []string{`CDC_DELIVERY="once": want one of exactly-once, at-least-once`}},
		{"transaction timeout above the broker's cap", map[string]string{"CDC_KAFKA_TRANSACTION_TIMEOUT": "16m"}, []string{`CDC_KAFKA_TRANSACTION_TIMEOUT="16m": want a duration from 1s to 15m0s`}},
		{"missing", map[string]string{"CDC_KAFKA_BROKERS": ""}, []string{"CDC_KAFKA_BROKERS: required but not set; want Kafka bootstrap brokers"}},
		{"bad broker named", map[string]string{"CDC_KAFKA_BROKERS": "ok:1,bad"}, []string{`broker "bad"`}},
		{"duplicate named", map[string]string{"CDC_TABLES": "a.b,a.b"}, []string{"a.b is listed twice"}},
		{"typo suggests", map[string]string{"CDC_SLOTT": "x"}, []string{"CDC_SLOTT: unknown variable; did you mean CDC_SLOT?"}},
		{"missing word suggests", map[string]string{"CDC_BROKERS": "x"}, []string{"did you mean CDC_KAFKA_BROKERS?"}},
		{"unrelated name", map[string]string{"CDC_FROBNICATE": "x"}, []string{"CDC_FROBNICATE: unknown variable; run `cdc help`"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, with(validEnv(), tt.set))
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error text lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestLoadConfigReportsEveryProblem(t *testing.T) {
	_, err := load(t, map[string]string{
		"CDC_SLOT":             "Bad-Slot",
		"CDC_SNAPSHOT_WORKERS": "zero",
		"CDC_LOG_FORMAT":       "yaml",
		"CDC_SLOTT":            "typo",
		"CDC_TABLES":           "a.b,a.b",
	})
	got := problemVars(t, err)
	slices.Sort(got)
	want := []string{"CDC_KAFKA_BROKERS", "CDC_LOG_FORMAT", "CDC_PG_URL", "CDC_SLOT", "CDC_SLOTT", "CDC_SNAPSHOT_WORKERS", "CDC_TABLES"}
	if !slices.Equal(got, want) {
		t.Fatalf("problems with %v, want %v", got, want)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("error has %d lines, want one per problem (%d):\n%v", len(lines), len(want), err)
	}
}

func TestLoadConfigNeverShowsPassword(t *testing.T) {
	tests := []struct {
		name string
		set  map[string]string
	}{
		{"bad URL port", map[string]string{"CDC_PG_URL": "postgres://cdc:" + testPassword + "@db:notaport/app"}},
		{"bad URL host", map[string]string{"CDC_PG_URL": "postgres://cdc:" + testPassword + "@[db/app"}},
		{"bad URL option", map[string]string{"CDC_PG_URL": "postgres://cdc:" + testPassword + "@db/app?sslmode=maybe"}},
		{"password in URL query", map[string]string{"CDC_PG_URL": "postgres://db/app?password=" + testPassword + "&sslmode=maybe"}},
		{"bad key=value", map[string]string{"CDC_PG_URL": "host=db password=" + testPassword + " sslmode=maybe"}},
		{"quoted key=value", map[string]string{"CDC_PG_URL": "host=db password='" + testPassword + " x' port=nope"}},
		{"other scheme", map[string]string{"CDC_PG_URL": "mysql://cdc:" + testPassword + "@db/app"}},
		{"no scheme", map[string]string{"CDC_PG_URL": "cdc:" + testPassword + "@db/app"}},
		{"unencoded @ in password", map[string]string{"CDC_PG_URL": "postgres://cdc:" + testPassword + "@x@db/app"}},
		{"unencoded / in password", map[string]string{"CDC_PG_URL": "postgres://cdc:" + testPassword + "/x@db/app"}},
		{"unencoded ? # : in password, bad port", map[string]string{"CDC_PG_URL": "postgres://cdc:" + testPassword + "?#:x@db:port/app"}},
		{"percent-encoded, bad option", map[string]string{"CDC_PG_URL": "postgresql://cdc:" + strings.ReplaceAll(testPassword, "-", "%2D") + "@db/app?sslmode=maybe"}},
		{"bad percent-encoding", map[string]string{"CDC_PG_URL": "postgres://cdc:" + testPassword + "%zz@db/app"}},
		{"sslpassword in URL query", map[string]string{"CDC_PG_URL": "postgres://db:x/app?sslpassword=" + testPassword}},
		{"key=value escaped quote", map[string]string{"CDC_PG_URL": `host=db password='` + testPassword + `\' x' port=nope`}},
		{"key=value unterminated quote", map[string]string{"CDC_PG_URL": "host=db password='" + testPassword + " x"}},
		{"key=value escaped space", map[string]string{"CDC_PG_URL": `host=db password=` + testPassword + `\ x sslmode=maybe`}},
		{"misspelt password variable", map[string]string{"CDC_PG_PASSWORD": testPassword}},
		{"valid URL, other problem", map[string]string{"CDC_SLOT": "BAD"}},
		{"primary: bad URL port", map[string]string{"CDC_PG_PRIMARY_URL": "postgres://cdc:" + testPassword + "@db:notaport/app"}},
		{"primary: bad key=value", map[string]string{"CDC_PG_PRIMARY_URL": "host=db password=" + testPassword + " sslmode=maybe"}},
		{"primary: other scheme", map[string]string{"CDC_PG_PRIMARY_URL": "mysql://cdc:" + testPassword + "@db/app"}},
		{"primary: valid, other problem", map[string]string{"CDC_PG_PRIMARY_URL": "postgres://cdc:" + testPassword + "@primary/app", "CDC_SLOT": "BAD"}},
		{"registry: user info in URL", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://u:" + testPassword + "@registry"}},
		{"registry: user info in a URL that does not parse", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://u:" + testPassword + "%zz@registry"}},
		{"registry: password without user", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://registry", "CDC_SCHEMA_REGISTRY_PASSWORD": testPassword}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, with(validEnv(), tt.set))
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			if strings.Contains(err.Error(), testPassword) || strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error text shows the password:\n%v", err)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}

func TestLoadConfigIgnoresProcessEnvironment(t *testing.T) {
	t.Setenv("CDC_SLOT", "BAD SLOT")
	t.Setenv("CDC_KAFKA_BROKERS", "not a broker")
	s, err := load(t, validEnv())
	if err != nil {
		t.Fatalf("LoadConfig read the process environment: %v", err)
	}
	if s.Pipeline.Slot != "tidemark" {
		t.Errorf("Slot = %q, want the default", s.Pipeline.Slot)
	}
}

func TestSettingsLogValueRedacts(t *testing.T) {
	s, err := load(t, validEnv())
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("start", "config", s)
	if strings.Contains(b.String(), testPassword) || !strings.Contains(b.String(), "cdc:xxxxx@db.example") {
		t.Errorf("log line does not redact the password: %s", b.String())
	}

	s, err = load(t, with(validEnv(), map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://registry",
		"CDC_SCHEMA_REGISTRY_USERNAME": "alice", "CDC_SCHEMA_REGISTRY_PASSWORD": testPassword}))
	if err != nil {
		t.Fatalf("LoadConfig with a schema registry: %v", err)
	}
	b.Reset()
	slog.New(slog.NewTextHandler(&b, nil)).Info("start", "config", s, "registry", s.Registry)
	if strings.Contains(b.String(), testPassword) || !strings.Contains(b.String(), "schema_registry_url=https://registry") {
		t.Errorf("log line shows the registry's password, or not its URL: %s", b.String())
	}
}

// TestReplicationFactorAcceptedBySink checks that every replication factor the configuration
// accepts is one the sink accepts too: -1 (the broker default) used to pass here and then stop
// the service.
func TestReplicationFactorAcceptedBySink(t *testing.T) {
	for _, rf := range []string{"-1", "1", "3", "32767"} {
		t.Run(rf, func(t *testing.T) {
			s, err := load(t, with(validEnv(), map[string]string{"CDC_TOPIC_REPLICATION_FACTOR": rf}))
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			p := s.Pipeline
			sk, err := sink.New(sink.Config{Brokers: p.Sink.Brokers, Delivery: p.Sink.Delivery, TransactionalID: "tidemark-app-" + p.Slot,
				Partitions: p.Sink.Partitions, ReplicationFactor: p.Sink.ReplicationFactor, WatermarkTopic: p.Sink.WatermarkTopic})
			if err != nil {
				t.Fatalf("sink.New refuses what the configuration accepted: %v", err)
			}
			sk.Close()
		})
	}
}

func TestLoadConfigSlotFailover(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
	}{{"", false}, {"true", true}, {"TRUE", true}, {"false", false}} {
		vars := validEnv()
		if tc.value != "" {
			vars = with(vars, map[string]string{"CDC_SLOT_FAILOVER": tc.value})
		}
		s, err := load(t, vars)
		if err != nil {
			t.Fatalf("CDC_SLOT_FAILOVER=%q: %v", tc.value, err)
		}
		if s.Pipeline.SlotFailover != tc.want {
			t.Errorf("CDC_SLOT_FAILOVER=%q: SlotFailover = %v, want %v", tc.value, s.Pipeline.SlotFailover, tc.want)
		}
	}
	_, err := load(t, with(validEnv(), map[string]string{"CDC_SLOT_FAILOVER": "maybe"}))
	if got := problemVars(t, err); !slices.Equal(got, []string{"CDC_SLOT_FAILOVER"}) {
		t.Errorf("CDC_SLOT_FAILOVER=maybe: problems with %v, want CDC_SLOT_FAILOVER: %v", got, err)
	}
}

// TestLoadConfigPrimaryURL: CDC_PG_PRIMARY_URL is optional, parsed like CDC_PG_URL, reported by
// name when it does not parse, and logged redacted.
func TestLoadConfigPrimaryURL(t *testing.T) {
	s, err := load(t, validEnv())
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if s.Pipeline.PrimaryURL != "" {
		t.Errorf("PrimaryURL = %q without CDC_PG_PRIMARY_URL, want empty", s.Pipeline.PrimaryURL)
	}
	primary := "postgres://cdc:" + testPassword + "@primary.example:5432/app"
	s, err = load(t, with(validEnv(), map[string]string{"CDC_PG_PRIMARY_URL": primary}))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if s.Pipeline.PrimaryURL != primary {
		t.Errorf("PrimaryURL = %q, want %q", s.Pipeline.PrimaryURL, primary)
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("start", "config", s)
	if strings.Contains(b.String(), testPassword) || !strings.Contains(b.String(), "cdc:xxxxx@primary.example") {
		t.Errorf("log line does not redact the primary's password: %s", b.String())
	}
	_, err = load(t, with(validEnv(), map[string]string{"CDC_PG_PRIMARY_URL": "postgres://primary:port/app"}))
	if got := problemVars(t, err); !slices.Equal(got, []string{"CDC_PG_PRIMARY_URL"}) {
		t.Errorf("bad CDC_PG_PRIMARY_URL: problems with %v, want CDC_PG_PRIMARY_URL: %v", got, err)
	}
}
