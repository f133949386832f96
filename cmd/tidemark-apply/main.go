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
//     primary key; with APPLY_CREATE_TABLES=true and json-with-schema or avro records, a missing table
//     is created from the records' schema. A mismatch stops the applier with an error naming it.
//
// Errors in the target or Kafka restart the session (reconnect, read the progress row, resume)
// with capped backoff, each logged; a mismatch between source and target is permanent and exits
// 1. A connection attempt waits at most APPLY_CONNECT_TIMEOUT (the target's, and Kafka's, which
// a session checks first), and a target connection silent for APPLY_RECEIVE_TIMEOUT while it
// waits for an answer is taken as dead. A configuration problem exits 2 with every problem
// listed, before anything connects; no secret is printed. The tables are chosen explicitly
// (APPLY_TABLES, or APPLY_ALL_TABLES=true), never PostgreSQL's own schemas.
//
// At start the applier logs how each connection is protected (APPLY_REQUIRE_TLS=true refuses
// one that is not encrypted and verified), and at its first session warns when the target role
// is a superuser. SIGTERM or SIGINT stops it in order; a second one exits at once. /healthz
// answers 503 when the applier is stalled (see stalled).
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

	"github.com/tidemark/cdc/internal/posture"
	"github.com/tidemark/cdc/internal/shutdown"
	"github.com/tidemark/cdc/pkg/change"
)

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	os.Exit(runSignals(context.Background(), sigs, os.Args[1:], os.Getenv, os.Environ(), os.Stdout, os.Stderr))
}

// runSignals is the whole program; main only supplies the process's environment and its
// signals. The first SIGTERM or SIGINT stops it in order: the cut being applied is rolled back
// (it is applied again at the next start), the reader and the connections are closed. A second
// signal exits at once (internal/shutdown), with the shell's 128+n.
func runSignals(ctx context.Context, sigs <-chan os.Signal, args []string, getenv func(string) string, environ []string, stdout, stderr io.Writer) int {
	ctx, stop := shutdown.New(ctx, sigs, stderr, shutdown.Options{
		Aftermath: "the target rolls back the cut being applied, and the next start applies it again",
	})
	defer stop.Close()
	return stop.Await(func() int { return exitCode(command(ctx, stop, args, getenv, environ, stdout, stderr), stderr) })
}

// exitCode maps run's error to the process's exit code: 2 for a configuration problem (each
// printed on a line) or a usage error, 1 for any other error, 0 for none.
func exitCode(err error, stderr io.Writer) int {
	if ce, ok := errors.AsType[*configError](err); ok {
		fmt.Fprintf(stderr, "tidemark-apply: configuration:\n")
		for _, p := range ce.problems {
			fmt.Fprintf(stderr, "  %v\n", p)
		}
		return 2
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "tidemark-apply: %v\n", err)
		return 1
	}
	return 0
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

// run is the command without signals (tests call it; ctx stops it); environ (os.Environ()) is
// read only to find unknown APPLY_* variables.
func run(ctx context.Context, args []string, getenv func(string) string, environ []string, stdout, stderr io.Writer) error {
	return command(ctx, nil, args, getenv, environ, stdout, stderr)
}

// command is run, told by stop (nil: no signals) which logger the service uses.
func command(ctx context.Context, stop *shutdown.Stopper, args []string, getenv func(string) string, environ []string, stdout, stderr io.Writer) error {
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
	if stop != nil {
		stop.Configured(log, 0)
	}
	log.Info("starting", "config", cfg)
	posture.Log(log, cfg.postures)
	m := newMetrics(cfg.stallAfter)
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
// Every session that ends is logged with its error (a connection attempt that failed or timed
// out among them) and the backoff before the next.
func loop(ctx context.Context, cfg config, open openSource, m *metrics, log *slog.Logger) error {
	backoff := 500 * time.Millisecond
	var st sessionState
	for {
		start := time.Now()
		err := session(ctx, cfg, open, m, log, &st)
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

// sessionState is what the sessions of one process share.
type sessionState struct {
	// superuserSaid is set once the warning about a superuser target role is logged.
	superuserSaid bool
}

// session connects to the target, resumes the reader from the progress row and applies cuts
// until an error.
func session(ctx context.Context, cfg config, open openSource, m *metrics, log *slog.Logger, st *sessionState) error {
	conn, err := connectTarget(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if !st.superuserSaid {
		super, err := superuser(ctx, conn)
		if err != nil {
			return err
		}
		if super {
			log.Warn("the target role is a superuser: a role that owns only the target tables and the progress table is advised (docs/production.md)",
				"role", conn.Config().User)
		}
		st.superuserSaid = true
	}
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
	m.watch(src)
	parts := prefetch(ctx, src)
	defer parts.close()
	dial := func(ctx context.Context) (*pgx.Conn, error) { return connectLoader(ctx, cfg) }
	a := &applier{conn: conn, progress: cfg.progress, name: cfg.name, targetSchema: cfg.targetSchema,
		createTables: cfg.createTables, log: log, tables: make(map[change.ExportID]*target), chunk: 512, dial: dial, skip: cfg.skip, stopWait: cfg.receiveTimeout}
	defer a.close(ctx)
	// What the parts of the cut being applied add up to.
	var cutRows, cutTxns int
	var cutCommit time.Time
	for {
		b, err := parts.next(ctx)
		if err != nil {
			return fmt.Errorf("read cut: %w", err)
		}
		m.holding(time.Now())
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
			m.partApplied()
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

// superuser reports whether the connection's role is a superuser.
func superuser(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var super bool
	if err := conn.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		return false, fmt.Errorf("read the target role: %w", err)
	}
	return super, nil
}
