package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// poller watches the publication: tables added are detected and hydrated, tables removed get
// their final record once the stream passes the removal. It also owns the snapshot requests.
type poller struct {
	cfg Config
	// conn is the poller's own connection (nil after a failure), made with connect.
	conn    *pgx.Conn
	connect func(context.Context) (*pgx.Conn, error)
	// holding tells the tracker which exports are about to be held (coordinator.holding).
	holding func([]change.ExportID)
	// chunk starts chunked copies of the exports that can take one and returns the others
	// (coordinator.startChunked); stop ends an export's chunked copy.
	chunk   func(context.Context, *pgx.Conn, []change.ExportID) ([]change.ExportID, error)
	stop    func(change.ExportID)
	repl    *replication.Stage
	log     *slog.Logger

	// known: exports routed (hydrated, hydrating, or queued), by the poller's goroutine only.
	known    map[change.ExportID]bool
	requests chan snapshot.Request
	wakeCh   chan struct{}

	mu      sync.Mutex
	pending []change.ExportID // re-hydrations asked for by the snapshot stage
}

// newPoller returns a poller that knows the resumed (hydrated) exports; its first poll hydrates
// every other published table.
func newPoller(cfg Config, connect func(context.Context) (*pgx.Conn, error), repl *replication.Stage, hydrated map[change.ExportID]change.LSN, log *slog.Logger) *poller {
	p := &poller{
		cfg: cfg, connect: connect, repl: repl, log: log.With("stage", "publication"),
		known:    make(map[change.ExportID]bool),
		requests: make(chan snapshot.Request, 16),
		wakeCh:   make(chan struct{}, 1),
	}
	for e := range hydrated {
		p.known[e] = true
	}
	return p
}

func (p *poller) wake() {
	select {
	case p.wakeCh <- struct{}{}:
	default:
	}
}

func (p *poller) rehydrate(e change.ExportID) {
	p.mu.Lock()
	p.pending = append(p.pending, e)
	p.mu.Unlock()
	p.wake()
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
		if err := p.pollConn(ctx); err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrFatal) {
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
		case <-p.wakeCh:
		}
	}
}

// pollConn polls, connecting first when the last connection was dropped.
func (p *poller) pollConn(ctx context.Context) error {
	if p.conn == nil {
		c, err := p.connect(ctx)
		if err != nil {
			return err
		}
		p.conn = c
	}
	return p.poll(ctx)
}

func (p *poller) poll(ctx context.Context) error {
	published, err := publishedTables(ctx, p.conn, p.cfg.Publication)
	if err != nil {
		return fmt.Errorf("poll publication: %w", err)
	}
	var added []change.ExportID
	for e := range published {
		if !p.known[e] {
			added = append(added, e)
		}
	}
	p.mu.Lock()
	for _, e := range p.pending {
		if _, ok := published[e]; ok && !slices.Contains(added, e) {
			added = append(added, e)
		}
	}
	p.pending = nil
	p.mu.Unlock()

	for e := range p.known {
		if _, ok := published[e]; ok {
			continue
		}
		at, err := currentWAL(ctx, p.conn)
		if err != nil {
			return fmt.Errorf("read WAL position: %w", err)
		}
		p.log.Info("table left the publication", "export", e.String(), "at", at.String())
		p.stop(e)
		p.repl.Remove(e, at)
		delete(p.known, e)
	}
	if len(added) == 0 {
		return nil
	}
	slices.SortFunc(added, compareExport)
	if err := change.CheckTopicCollisions(p.cfg.TopicPrefix, append(p.knownList(), added...)); err != nil {
		return fatal(err)
	}
	copied, err := p.chunk(ctx, p.conn, added)
	if err != nil {
		return err
	}
	for _, e := range added {
		if !slices.Contains(copied, e) {
			p.known[e] = true
		}
	}
	if added = copied; len(added) == 0 {
		return nil
	}
	// Hold their changes before the snapshot's slot exists, so nothing falls in between. One
	// still hydrated (added again before its removal took effect) stops advancing first.
	p.holding(added)
	if err := p.repl.Detect(ctx, added); err != nil {
		return err
	}
	for _, e := range added {
		p.known[e] = true
	}
	p.log.Info("hydrating tables", "exports", fmt.Sprint(added))
	select {
	case p.requests <- snapshot.Request{Exports: added}:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (p *poller) knownList() []change.ExportID {
	out := make([]change.ExportID, 0, len(p.known))
	for e := range p.known {
		out = append(out, e)
	}
	return out
}

func compareExport(a, b change.ExportID) int {
	if a.Schema != b.Schema {
		if a.Schema < b.Schema {
			return -1
		}
		return 1
	}
	switch {
	case a.Table < b.Table:
		return -1
	case a.Table > b.Table:
		return 1
	}
	return 0
}
