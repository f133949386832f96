// Command tidemark-apply keeps a target PostgreSQL in step with tables that cdc publishes to
// Kafka. It reads consistent cuts with pkg/consumer and applies each in one target transaction.
//
// Guarantees:
//
//   - Atomic cuts. A cut (every change of the chosen tables with commit LSN in (previous cut,
//     cut], whole source transactions, in commit order) is applied in one transaction of the
//     target. A reader of the target in REPEATABLE READ (or any single statement) never sees
//     part of a source transaction, nor one table ahead of another.
//   - Exactly once. The same transaction writes the cut's position (LSN and the reader's offsets)
//     and the running count of source transactions to the progress table (APPLY_PROGRESS_TABLE,
//     row APPLY_NAME). On start the applier reads that row and resumes the reader right after it,
//     so a crash at any moment neither applies a change twice nor skips one.
//   - Row semantics. Copied rows (op r) and inserts upsert by key. An update sets the columns
//     it carries: one that leaves unchanged TOAST columns out (header tidemark.unchanged) updates
//     only the others, and must find its row. A delete deletes by key; a key change (a delete
//     carrying tidemark.new_key, then a create) moves the row, then merges the create into it. A
//     truncate truncates. A new copy of a table (re-copy) clears the target table in the cut
//     that carries the new copy.
//   - Exact values. Values are passed to PostgreSQL as text and cast to the target column's
//     type, so its own input function reads them (values.go says what is converted first).
//   - Target tables must exist with the source's columns (a superset is fine) and its key as
//     primary key; with APPLY_CREATE_TABLES=true and json-with-schema records, a missing table
//     is created from the records' schema. A mismatch stops the applier with an error naming it.
//
// Errors in the target or Kafka restart the session (reconnect, read the progress row, resume)
// with capped backoff; a mismatch between source and target is permanent and exits 1. A
// configuration problem exits 2 with every problem listed; no secret is printed.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/secret"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Environ(), os.Stdout, os.Stderr)
	stop()
	if ce, ok := errors.AsType[*configError](err); ok {
		fmt.Fprintf(os.Stderr, "tidemark-apply: configuration:\n")
		for _, p := range ce.problems {
			fmt.Fprintf(os.Stderr, "  %v\n", p)
		}
		os.Exit(2)
	}
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tidemark-apply: %v\n", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// cutSource is what the applier needs of the reader: the next cut, as a batch.
type cutSource interface {
	Next(ctx context.Context) (*batch, error)
	Close()
}

// prefetcher reads the next part while the last one is applied: the reader's decoding and the
// target's writing overlap. It holds at most one part besides the one being applied.
type prefetcher struct {
	src    cutSource
	parts  chan prefetched
	cancel context.CancelFunc
	done   chan struct{}
}

type prefetched struct {
	b   *batch
	err error
}

func prefetch(ctx context.Context, src cutSource) *prefetcher {
	ctx, cancel := context.WithCancel(ctx)
	p := &prefetcher{src: src, parts: make(chan prefetched, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			b, err := src.Next(ctx)
			select {
			case p.parts <- prefetched{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return p
}

func (p *prefetcher) next(ctx context.Context) (*batch, error) {
	select {
	case r := <-p.parts:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close stops the reading goroutine and closes the source.
func (p *prefetcher) close() {
	p.cancel()
	<-p.done
	p.src.Close()
}

// openSource opens the reader at a position saved in the progress table ("" for the start).
type openSource func(ctx context.Context, cfg config, position string, log *slog.Logger) (cutSource, error)

// run is the command; environ (os.Environ()) is read only to find unknown APPLY_* variables.
func run(ctx context.Context, args []string, getenv func(string) string, environ []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch {
	case cmd == "help" || cmd == "-h" || cmd == "--help":
		writeHelp(stdout)
		return nil
	case cmd != "run" || len(args) > 1:
		fmt.Fprintf(stderr, "tidemark-apply: unknown command %q\n\n", args)
		writeHelp(stderr)
		return errUsage
	}
	cfg, err := loadConfig(getenv, environ)
	if err != nil {
		return err
	}
	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	var h slog.Handler = slog.NewJSONHandler(stderr, opts)
	if cfg.logFormat == "text" {
		h = slog.NewTextHandler(stderr, opts)
	}
	log := slog.New(h)
	log.Info("starting", "config", cfg)
	m := newMetrics()
	g, ctx := errgroup.WithContext(ctx)
	if cfg.httpAddr != "" {
		g.Go(func() error { return serveHTTP(ctx, cfg.httpAddr, m, log) })
	}
	g.Go(func() error {
		err := loop(ctx, cfg, openConsumer, m, log)
		if ctx.Err() != nil {
			return nil
		}
		return err
	})
	err = g.Wait()
	if err != nil {
		log.Error("stopped", "err", err)
	}
	return err
}

// loop runs sessions until ctx ends or one fails permanently, with capped backoff between.
func loop(ctx context.Context, cfg config, open openSource, m *metrics, log *slog.Logger) error {
	backoff := 500 * time.Millisecond
	for {
		start := time.Now()
		err := session(ctx, cfg, open, m, log)
		if ctx.Err() != nil || errors.Is(err, errPermanent) {
			return err
		}
		if time.Since(start) > time.Minute {
			backoff = 500 * time.Millisecond
		}
		log.Warn("session ended; restarting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// session connects to the target, resumes the reader from the progress row and applies cuts
// until an error.
func session(ctx context.Context, cfg config, open openSource, m *metrics, log *slog.Logger) error {
	conn, err := pgx.Connect(ctx, cfg.targetURL)
	if err != nil {
		return fmt.Errorf("connect to the target: %s", secret.Scrub(err.Error(), cfg.targetURL))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := ensureProgress(ctx, conn, cfg.progress); err != nil {
		return err
	}
	p, found, err := readProgress(ctx, conn, cfg.progress, cfg.name)
	if err != nil {
		return err
	}
	if found {
		log.Info("resuming", "lsn", p.lsn, "txns_applied", p.txns)
	} else {
		log.Info("no progress recorded: starting from the beginning of the topics")
	}
	src, err := open(ctx, cfg, p.position, log)
	if err != nil {
		return err
	}
	parts := prefetch(ctx, src)
	defer parts.close()
	dial := func(ctx context.Context) (*pgx.Conn, error) {
		c, err := pgx.Connect(ctx, cfg.targetURL)
		if err != nil {
			return nil, errors.New(secret.Scrub(err.Error(), cfg.targetURL))
		}
		return c, nil
	}
	a := &applier{conn: conn, progress: cfg.progress, name: cfg.name, targetSchema: cfg.targetSchema,
		createTables: cfg.createTables, log: log, tables: make(map[change.ExportID]*target), chunk: 512, dial: dial}
	defer a.close(ctx)
	// What the parts of the cut being applied add up to.
	var cutRows, cutTxns int
	var cutCommit time.Time
	for {
		b, err := parts.next(ctx)
		if err != nil {
			return fmt.Errorf("read cut: %w", err)
		}
		rows, err := a.apply(ctx, b)
		if b.load != nil {
			if err != nil {
				return fmt.Errorf("load %s (part %d): %w", b.load.Export, b.part, err)
			}
			m.loaded(rows)
			if b.final {
				log.Info("table loaded: it joins with the next cut that reaches it", "export", b.load.Export.String(), "parts", b.part+1)
			}
			continue
		}
		reload := errors.Is(err, errReload) // the cut committed; another load starts over
		if err != nil && !reload {
			return fmt.Errorf("apply cut %s: %w", b.lsn, err)
		}
		cutRows, cutTxns = cutRows+rows, cutTxns+b.txns
		if b.commitTime.After(cutCommit) {
			cutCommit = b.commitTime
		}
		if !b.final {
			continue
		}
		b.commitTime = cutCommit
		m.applied(b, cutRows, time.Now())
		log.Debug("applied cut", "lsn", b.lsn.String(), "rows", cutRows, "txns", cutTxns, "parts", b.part+1)
		cutRows, cutTxns, cutCommit = 0, 0, time.Time{}
		if reload {
			return err
		}
	}
}
