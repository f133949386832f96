package pipeline

import (
	"context"
	"errors"
	"sync"

	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// typeLoader reads the descriptions of types that are not built in (enums, domains,
// composites, ...) for codec.Types, on one connection of its own: opened at the first load,
// kept for the next ones, and closed with the plan. Loads may come from several stages at
// once; a connection serves one query at a time, so they take turns.
type typeLoader struct {
	open   func(context.Context) (typeConn, error)
	mu     sync.Mutex
	conn   typeConn
	closed bool
}

// typeConn is the loader's connection.
type typeConn interface {
	types(ctx context.Context, oids []uint32) ([]codec.TypeInfo, error)
	close()
}

// catalogConn is a typeConn on PostgreSQL.
type catalogConn struct{ c *pgcat.Conn }

func (c catalogConn) types(ctx context.Context, oids []uint32) ([]codec.TypeInfo, error) {
	return pgcat.QueryTypes(ctx, c.c, oids)
}

func (c catalogConn) close() { _ = c.c.Close(context.Background()) }

// newTypeLoader loads types on a connection to url.
func newTypeLoader(url string, t pgcat.Timeouts) *typeLoader {
	return &typeLoader{open: func(ctx context.Context) (typeConn, error) {
		c, err := connect(ctx, url, t)
		if err != nil {
			return nil, err
		}
		return catalogConn{c}, nil
	}}
}

var errLoaderClosed = errors.New("type catalog closed")

// load returns the descriptions of oids. A connection that failed is closed and not used
// again: the next load opens another.
func (l *typeLoader) load(ctx context.Context, oids []uint32) ([]codec.TypeInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errLoaderClosed
	}
	if l.conn == nil {
		conn, err := l.open(ctx)
		if err != nil {
			return nil, err
		}
		l.conn = conn
	}
	infos, err := l.conn.types(ctx, oids)
	if err != nil {
		l.conn.close()
		l.conn = nil
	}
	return infos, err
}

// close closes the connection; a load after it fails.
func (l *typeLoader) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.conn != nil {
		l.conn.close()
		l.conn = nil
	}
}
