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
		tables := make(map[change.ExportID]*change.Table, len(r.load))
		for _, e := range r.load {
			// Missing or unsupported: the copy path reports it for this export alone.
			if t, err := cat.LoadTable(ctx, e); err == nil {
				tables[e] = t
			}
		}
		next = evLoaded{tables: tables, reply: reply}
	}
}

// connCatalog reads the catalog on one connection: tables as the publication pub publishes them.
type connCatalog struct {
	conn *pgcat.Conn
	pub  string
}

func (c connCatalog) LoadTable(ctx context.Context, e change.ExportID) (*change.Table, error) {
	return pgcat.LoadTable(ctx, c.conn, c.pub, e)
}

func (c connCatalog) CurrentWAL(ctx context.Context) (change.LSN, error) {
	return pgcat.CurrentWAL(ctx, c.conn)
}
