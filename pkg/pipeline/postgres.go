package pipeline

import (
	"context"
	"errors"

	"github.com/tidemark/cdc/pkg/pgcat"
)

// connect opens an ordinary connection (pgcat.Connect). A connection string or TLS setting that
// must be fixed is fatal. Its errors are scrubbed of the connection string's passwords.
func connect(ctx context.Context, url string, t pgcat.Timeouts) (*pgcat.Conn, error) {
	conn, err := pgcat.Connect(ctx, url, t)
	if errors.Is(err, pgcat.ErrConfig) {
		return nil, fatal(err)
	}
	return conn, err
}
