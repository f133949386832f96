package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
)

// poller polls the publication and hands what it sees to the owner (evPolled), which decides
// what is added and removed. It owns its connection.
type poller struct {
	cfg Config
	// conn is the poller's own connection (nil after a failure), made with connect.
	conn    *pgcat.Conn
	connect func(context.Context) (*pgcat.Conn, error)
	in      *inbox
	log     *slog.Logger
	// toast, when set, warns about newly published tables whose updates may omit values.
	toast *pgcat.ToastWarnings
}

func newPoller(cfg Config, connect func(context.Context) (*pgcat.Conn, error), in *inbox, log *slog.Logger) *poller {
	return &poller{cfg: cfg, connect: connect, in: in, log: log.With("stage", "publication")}
}

// run polls until ctx ends. A poll that fails on its connection (a server restart, a cut) is
// logged and retried on a new connection at the next tick; only fatal errors end run.
func (p *poller) run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.PublicationPollInterval)
	defer t.Stop()
	defer func() {
		if p.conn != nil {
			p.conn.Close(context.Background())
		}
	}()
	for {
		if err := p.poll(ctx); err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrFatal) || errors.Is(err, replication.ErrSetup) {
				return err
			}
			p.log.Warn("publication poll failed; retrying on a new connection", "err", err, "retry_in", p.cfg.PublicationPollInterval.String())
			if p.conn != nil {
				p.conn.Close(context.Background())
				p.conn = nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-p.in.wake:
		}
	}
}

// poll reads the publication, connecting first when the last connection was dropped.
func (p *poller) poll(ctx context.Context) error {
	if p.conn == nil {
		c, err := p.connect(ctx)
		if err != nil {
			return err
		}
		p.conn = c
	}
	published, err := pgcat.PublishedTables(ctx, p.conn, p.cfg.Publication)
	if err != nil {
		return fmt.Errorf("poll publication: %w", err)
	}
	if p.toast != nil {
		p.toast.Check(ctx, p.conn, p.cfg.Publication, p.cfg.UnchangedToast, p.cfg.UnchangedPlaceholder, published, p.log)
	}
	leaves, err := pgcat.PartitionLeaves(ctx, p.conn, p.cfg.Publication)
	if err != nil {
		return fmt.Errorf("poll partitions: %w", err)
	}
	defs, err := pgcat.PublishedAs(ctx, p.conn, p.cfg.Publication)
	if err != nil {
		return fmt.Errorf("poll publication: %w", err)
	}
	return takeIn(ctx, p.in, connCatalog{conn: p.conn, pub: p.cfg.Publication},
		evPolled{published: published, leaves: leaves, defs: defs})
}

// takeIn has the owner take in a poll of the publication (evPolled, without its WAL position and
// reply) and returns the poll's outcome. It reads on cat what the owner must not wait for: the
// server's WAL position, after the publication was read (where tables that left it are
// removed), and the schemas of the tables the owner adds (evLoaded).
func takeIn(ctx context.Context, o *inbox, cat catalog, ev evPolled) error {
	wal, err := cat.CurrentWAL(ctx)
	if err != nil {
		return fmt.Errorf("read WAL position: %w", err)
	}
	reply := make(chan pollReply, 1)
	ev.wal, ev.reply = wal, reply
	var next event = ev
	for {
		if !o.send(ctx, next) {
			return ctx.Err()
		}
		var r pollReply
		select {
		case r = <-reply:
		case <-o.stopped:
			return ctx.Err()
		}
		if r.load == nil {
			return r.err
		}
		// One read for every table, however many: a table missing or unsupported is absent
		// from tables, and the copy path reports it for that export alone.
		// A read that failed as a whole fails the poll: nothing is started, and the next poll
		// takes the tables in again.
		tables, _, err := cat.LoadTables(ctx, r.load)
		next = evLoaded{tables: tables, err: err, reply: reply}
	}
}

// connCatalog reads the catalog on one connection: tables as the publication pub publishes them.
type connCatalog struct {
	conn *pgcat.Conn
	pub  string
}

func (c connCatalog) LoadTables(ctx context.Context, exports []change.ExportID) (map[change.ExportID]*change.Table, map[change.ExportID]error, error) {
	return pgcat.LoadTables(ctx, c.conn, c.pub, exports)
}

func (c connCatalog) CurrentWAL(ctx context.Context) (change.LSN, error) {
	return pgcat.CurrentWAL(ctx, c.conn)
}
