package pgcat

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/secret"
)

// ErrConfig marks a connection failure that retrying cannot fix: a connection string that does
// not parse, or a TLS certificate that the string's settings refuse. The message says what to
// change. Check with errors.Is.
var ErrConfig = errors.New("invalid PostgreSQL connection settings")

// ErrConnClosed matches the error of a connection pgx closed after a read or write on it failed
// (pgx's simple-protocol Exec returns it instead of the read's own error).
var ErrConnClosed = pgconn.ErrConnClosed

type configError struct{ err error }

func (e *configError) Error() string   { return e.err.Error() }
func (e *configError) Unwrap() []error { return []error{ErrConfig, e.err} }

// SessionParams returns the session settings pinned on every connection Tidemark makes
// (ordinary and replication ones), so text renderings of values do not depend on database
// defaults.
func SessionParams() map[string]string {
	return map[string]string{
		"DateStyle":          "ISO",
		"IntervalStyle":      "postgres",
		"TimeZone":           "UTC",
		"extra_float_digits": "3",
	}
}

// ParseConfig parses a PostgreSQL URL or keyword/value DSN for an ordinary connection, pins
// SessionParams (over the string's own) and bounds the connection by t (Timeouts.Apply). Its
// error matches ErrConfig and is scrubbed of the string's passwords.
func ParseConfig(url string, t Timeouts) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, &configError{fmt.Errorf("parse connection string: %w", secret.ScrubError(err, url))}
	}
	t.Apply(&cfg.Config)
	for k, v := range SessionParams() {
		cfg.RuntimeParams[k] = v
	}
	return cfg, nil
}

// ReplicationConfig is ParseConfig for a logical replication connection (replication=database)
// named application ("": the connection string's own name), for the packages that speak the
// replication protocol on a *pgconn.PgConn of their own.
func ReplicationConfig(url, application string, t Timeouts) (*pgconn.Config, error) {
	cfg, err := ParseConfig(url, t)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["replication"] = "database"
	if application != "" {
		cfg.RuntimeParams["application_name"] = application
	}
	return &cfg.Config, nil
}

// Dial opens an ordinary connection with cfg (from ParseConfig, possibly adjusted). Its error
// is scrubbed of the connection string's passwords, names the server, and says what to fix: a
// TLS certificate the settings refuse matches ErrConfig.
func Dial(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, explainConnect(ctx, err, &cfg.Config, cfg.ConnString())
	}
	return conn, nil
}

// explainConnect turns a failed connection attempt into an error that says what to check. The
// host and database come from the connection string too: a mistyped one may hold a piece of the
// password, so the whole text is scrubbed.
func explainConnect(ctx context.Context, err error, cfg *pgconn.Config, url string) error {
	if why := explainTLS(err); why != "" {
		return &configError{secret.ScrubError(fmt.Errorf("cannot connect to PostgreSQL at %s:%d: %s (%w)", cfg.Host, cfg.Port, why, err), url)}
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return secret.ScrubError(fmt.Errorf("cannot connect to PostgreSQL at %s:%d database %s: no answer within the connect timeout of %s (%w); check CDC_PG_URL and that the server is running and reachable",
			cfg.Host, cfg.Port, cfg.Database, cfg.ConnectTimeout, err), url)
	}
	return secret.ScrubError(fmt.Errorf("cannot connect to PostgreSQL at %s:%d database %s: %w; check CDC_PG_URL and that the server is running",
		cfg.Host, cfg.Port, cfg.Database, err), url)
}

// explainTLS says in one sentence what to fix when err is a TLS verification failure ("" when
// it is not one).
func explainTLS(err error) string {
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.As(err, &unknownCA):
		return "PostgreSQL's TLS certificate is signed by an authority not in sslrootcert: set sslrootcert in CDC_PG_URL to the CA that signed it"
	case errors.As(err, &hostErr):
		return fmt.Sprintf("PostgreSQL's TLS certificate is not valid for %q: connect by a name it is valid for in CDC_PG_URL, or reissue the server's certificate", hostErr.Host)
	}
	return ""
}

// Querier is what the catalog reads use of a connection: *pgx.Conn and *Conn have it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	// PgConn is the underlying connection (its server parameters: the server version).
	PgConn() *pgconn.PgConn
}

// Conn is an ordinary connection for the packages that only read the catalog and run the
// queries of this package and of the slot administration: it is a Querier and can be closed,
// and nothing else of pgx shows through.
type Conn struct {
	conn *pgx.Conn
}

// Connect opens an ordinary connection named "tidemark" with the session settings pinned and
// bounded by t. Its errors are those of ParseConfig and Dial.
func Connect(ctx context.Context, url string, t Timeouts) (*Conn, error) {
	cfg, err := ParseConfig(url, t)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "tidemark"
	conn, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Conn{conn: conn}, nil
}

// Exec runs sql (Querier).
func (c *Conn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.conn.Exec(ctx, sql, args...)
}

// Query runs sql (Querier).
func (c *Conn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return c.conn.Query(ctx, sql, args...)
}

// QueryRow runs sql (Querier).
func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return c.conn.QueryRow(ctx, sql, args...)
}

// PgConn is the underlying connection (Querier).
func (c *Conn) PgConn() *pgconn.PgConn { return c.conn.PgConn() }

// Close closes the connection.
func (c *Conn) Close(ctx context.Context) error { return c.conn.Close(ctx) }

// IsClosed reports whether the connection is closed or broken.
func (c *Conn) IsClosed() bool { return c.conn.IsClosed() }

// Database reads the name of the connection's database.
func Database(ctx context.Context, q Querier) (string, error) {
	var name string
	if err := q.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		return "", fmt.Errorf("read database name: %w", err)
	}
	return name, nil
}

// SQLState returns PostgreSQL's error code of err ("" and false when err holds no server error).
func SQLState(err error) (string, bool) {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code, true
	}
	return "", false
}

// TransientSQLState reports whether PostgreSQL's error code says it cannot serve now but will
// again: a connection exception (class 08), or a server shutting down or starting up
// (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now).
func TransientSQLState(code string) bool {
	switch code {
	case "57P01", "57P02", "57P03":
		return true
	}
	return len(code) == 5 && code[:2] == "08"
}
