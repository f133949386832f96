package pipeline

import (
	"context"
	"errors"

	"github.com/tidemark/cdc/pkg/change"
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

// keyColumns reads key columns for the replication stage (replication.Keys), on a connection
// of its own per call.
type keyColumns struct {
	connect func(context.Context) (*pgcat.Conn, error)
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
	t, err := pgcat.LoadTable(ctx, conn, "", e)
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
