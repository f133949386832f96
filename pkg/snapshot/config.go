package snapshot

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// Defaults for the zero values of Config.
const (
	DefaultWorkers          = 4
	DefaultSlotPrefix       = "tidemark"
	DefaultBatchRows        = 2000
	DefaultBatchBytes       = 1 << 20
	DefaultRangeBlocks      = 2048 // 16 MiB of 8 KiB blocks
	DefaultProgressInterval = 10 * time.Second
	DefaultSlotWaitTimeout  = 5 * time.Minute
)

// maxSlotPrefix leaves room for "_snap_" and a ten-digit backend PID in PostgreSQL's 63-byte names.
const maxSlotPrefix = 63 - len("_snap_") - 10

// Config configures the snapshot stage. The zero value of every field but ConnString is usable.
type Config struct {
	// ConnString is a PostgreSQL URL or keyword/value DSN. Workers use ordinary connections; the
	// slot connection adds replication=database.
	ConnString string
	// Standby says that ConnString names a hot standby (PostgreSQL 16+): copies read there, and
	// what they write goes through PrimaryConnString. The chunked strategy needs it; the copy
	// strategy writes nothing.
	Standby bool
	// PrimaryConnString, with Standby, connects to the standby's primary: the chunked copies
	// write their markers there and wait until the standby has replayed them before they read,
	// and temporary slot creation asks it for running-transactions records
	// (pg_log_standby_snapshot) instead of waiting for the next one.
	PrimaryConnString string
	// Publication is the publication whose column lists and row filters every copy honours
	// (pgcat.LoadTable); "" copies every column and row.
	Publication string
	// Workers is the number of parallel COPY connections (CDC_SNAPSHOT_WORKERS); default 4.
	Workers int
	// SlotPrefix names the temporary slots: <SlotPrefix>_snap_<backend pid>. Lower-case letters,
	// digits and underscores; default "tidemark".
	SlotPrefix string
	// Codec configures the row encoder.
	Codec codec.Config
	// BatchRows bounds the rows of one KindSnapshot unit; default 2000.
	BatchRows int
	// BatchBytes bounds the encoded bytes of one KindSnapshot unit; default 1 MiB.
	BatchBytes int
	// RangeBlocks is the target number of blocks per ctid range; default 2048 (16 MiB).
	RangeBlocks int
	// ProgressInterval is the least time between two progress logs of one table; default 10s.
	ProgressInterval time.Duration
	// SlotWaitTimeout bounds the wait of slot creation for open transactions; default 5m.
	SlotWaitTimeout time.Duration
	// Limiter caps the rows all copies read per second together
	// (CDC_SNAPSHOT_MAX_ROWS_PER_SECOND, see NewLimiter); nil is unlimited. Give the stage and
	// the chunker the same one.
	Limiter *rate.Limiter
	// ChunkRows is the rows of one chunk of a chunked copy; 0 sizes chunks at about 1 MiB of
	// the table's heap each, between 1,000 and 10,000 rows.
	ChunkRows int
	// Logger receives the stage's logs; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the stage's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Timeouts bound connection attempts and, on the worker connections, each wait for the
	// server's next bytes (a COPY or query that hears nothing for Timeouts.Receive fails, and
	// the copy is retried on a new connection). The exporting connection's slot creation may
	// wait for open transactions up to SlotWaitTimeout: it has the connect bound only.
	Timeouts pgcat.Timeouts
}

// withDefaults fills zero values and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.SlotPrefix == "" {
		c.SlotPrefix = DefaultSlotPrefix
	}
	if c.BatchRows <= 0 {
		c.BatchRows = DefaultBatchRows
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.RangeBlocks <= 0 {
		c.RangeBlocks = DefaultRangeBlocks
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.SlotWaitTimeout <= 0 {
		c.SlotWaitTimeout = DefaultSlotWaitTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var problems []error
	if c.ConnString == "" {
		problems = append(problems, errors.New("connection string is empty"))
	}
	if len(c.SlotPrefix) > maxSlotPrefix {
		problems = append(problems, fmt.Errorf("slot prefix %q is longer than %d bytes", c.SlotPrefix, maxSlotPrefix))
	}
	for _, r := range c.SlotPrefix {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			problems = append(problems, fmt.Errorf("slot prefix %q: only lower-case letters, digits and underscores are allowed", c.SlotPrefix))
			break
		}
	}
	return c, errors.Join(problems...)
}

// parseConnConfig parses the connection string once and bounds its connection attempts. Its error
// is scrubbed of the string's passwords.
func parseConnConfig(s string, t pgcat.Timeouts) (*pgx.ConnConfig, error) {
	return pgcat.ParseConfig(s, t.ConnectOnly())
}

// workerConfig is a copy of base with reads bounded by t.Receive.
func workerConfig(base *pgx.ConnConfig, t pgcat.Timeouts) *pgx.ConnConfig {
	cc := base.Copy()
	t.Apply(&cc.Config)
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "tidemark-snapshot"
	}
	cc.BuildContextWatcherHandler = cancelOnServer
	return cc
}

// replicationConfig is a copy of base's pgconn config for a logical replication connection.
func replicationConfig(base *pgx.ConnConfig) *pgx.ConnConfig {
	cc := base.Copy()
	cc.RuntimeParams["replication"] = "database"
	cc.BuildContextWatcherHandler = cancelOnServer
	return cc
}

// cancelOnServer makes a cancelled context also cancel the running statement on the server (a
// slot creation waiting for old transactions, a COPY), instead of only dropping the socket, which
// a backend waiting on a lock would not notice: a temporary slot would appear after its session
// was given up and hold a WAL sender until the blocking transaction ended.
func cancelOnServer(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
}
