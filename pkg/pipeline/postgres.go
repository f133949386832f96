package pipeline

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/liveness"
	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// connect opens an ordinary connection with the pinned session settings. Its errors are scrubbed
// of the connection string's passwords.
func connect(ctx context.Context, url string, t liveness.Timeouts) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fatal(fmt.Errorf("parse CDC_PG_URL: %w", secret.ScrubError(err, url)))
	}
	t.Apply(&cfg.Config)
	for k, v := range snapshot.SessionParams() {
		cfg.RuntimeParams[k] = v
	}
	cfg.RuntimeParams["application_name"] = "tidemark"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		// The host and database come from the connection string too: a mistyped one may hold
		// a piece of the password.
		if why := explainTLS(err); why != "" {
			return nil, fatal(secret.ScrubError(fmt.Errorf("cannot connect to PostgreSQL at %s:%d: %s (%w)", cfg.Host, cfg.Port, why, err), url))
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, secret.ScrubError(fmt.Errorf("cannot connect to PostgreSQL at %s:%d database %s: no answer within the connect timeout of %s (%w); check CDC_PG_URL and that the server is running and reachable",
				cfg.Host, cfg.Port, cfg.Database, cfg.ConnectTimeout, err), url)
		}
		return nil, secret.ScrubError(fmt.Errorf("cannot connect to PostgreSQL at %s:%d database %s: %w; check CDC_PG_URL and that the server is running",
			cfg.Host, cfg.Port, cfg.Database, err), url)
	}
	return conn, nil
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

// keyColumns reads key columns for the replication stage (replication.Keys), on a connection
// of its own per call.
type keyColumns struct {
	connect func(context.Context) (*pgx.Conn, error)
}

// KeyColumns loads the key columns of e (replica identity FULL tables).
func (k *keyColumns) KeyColumns(ctx context.Context, e change.ExportID) ([]string, error) {
	conn, err := k.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	// Every column, whatever the publication's column list: the names only pick the key out
	// of a Relation message's columns, and a key column the list leaves out must not fail the
	// stream (the copy refuses that table alone).
	t, err := snapshot.LoadTable(ctx, conn, "", e)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, col := range t.Columns {
		if col.Key {
			keys = append(keys, col.Name)
		}
	}
	return keys, nil
}
