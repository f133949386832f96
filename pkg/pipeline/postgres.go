package pipeline

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// connect opens an ordinary connection with the pinned session settings. Its errors are scrubbed
// of the connection string's passwords.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fatal(fmt.Errorf("parse CDC_PG_URL: %w", secret.ScrubError(err, url)))
	}
	for k, v := range snapshot.SessionParams() {
		cfg.RuntimeParams[k] = v
	}
	cfg.RuntimeParams["application_name"] = "tidemark"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		// The host and database come from the connection string too: a mistyped one may hold
		// a piece of the password.
		return nil, secret.ScrubError(fmt.Errorf("cannot connect to PostgreSQL at %s:%d database %s: %w; check CDC_PG_URL and that the server is running",
			cfg.Host, cfg.Port, cfg.Database, err), url)
	}
	return conn, nil
}
