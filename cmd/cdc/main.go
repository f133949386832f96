// Command cdc is Tidemark: PostgreSQL logical replication to Kafka, one topic per table, with a
// watermark per table. Configuration comes only from CDC_* environment variables; `cdc help`
// lists them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/tidemark/cdc/internal/httpapi"
	"github.com/tidemark/cdc/internal/preflight"
	"github.com/tidemark/cdc/internal/shutdown"
	"github.com/tidemark/cdc/internal/supervise"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	os.Exit(runSignals(context.Background(), sigs, os.Args[1:], os.Getenv, os.Environ(), os.Stdout, os.Stderr))
}

// run is the whole program without signals (tests call it; ctx stops it).
func run(ctx context.Context, args []string, getenv func(string) string, environ []string, stdout, stderr io.Writer) int {
	return runSignals(ctx, nil, args, getenv, environ, stdout, stderr)
}

// runSignals is the whole program; main only supplies the process's environment and its
// signals: the first SIGTERM or SIGINT stops it in order, a second exits at once (see newStopper).
func runSignals(ctx context.Context, sigs <-chan os.Signal, args []string, getenv func(string) string, environ []string, stdout, stderr io.Writer) int {
	ctx, stop := newStopper(ctx, sigs, stderr)
	defer stop.Close()
	return stop.Await(func() int { return command(ctx, stop, args, getenv, environ, stdout, stderr) })
}

// command runs the command args name.
func command(ctx context.Context, stop *shutdown.Stopper, args []string, getenv func(string) string, environ []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch cmd {
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && args[1] == "--markdown" {
			fmt.Fprint(stdout, helpMarkdown())
			return exitOK
		}
		writeHelp(stdout)
		return exitOK
	case "version", "--version":
		fmt.Fprintln(stdout, "tidemark cdc", version)
		return exitOK
	case "resnapshot":
		return resnapshot(ctx, args[1:], getenv, stdout, stderr)
	case "health":
		return health(ctx, args[1:], getenv, stdout, stderr)
	case "run", "watermarks", "check":
	default:
		fmt.Fprintf(stderr, "cdc: unknown command %q\n\n", cmd)
		writeHelp(stderr)
		return exitConfig
	}

	settings, err := LoadConfig(getenv, environ)
	if err != nil {
		fmt.Fprintf(stderr, "cdc: invalid configuration:\n%v\n\nRun `cdc help` for every variable.\n", err)
		return exitConfig
	}
	log := newLogger(stderr, settings)
	cfg := settings.Pipeline
	cfg.Logger = log
	stop.Configured(log, cfg.ShutdownTimeout)

	if cmd == "check" {
		wait, err := preflight.ParseArgs(args[1:])
		if err != nil {
			fmt.Fprintf(stderr, "cdc check: %v\n", err)
			return exitConfig
		}
		if !preflight.Check(ctx, cfg, settings.TLS, settings.Registry, wait, stdout) {
			return exitFailed
		}
		return exitOK
	}
	if cmd == "watermarks" {
		if err := printWatermarks(ctx, cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "cdc watermarks: %v\n", err)
			return exitFailed
		}
		return exitOK
	}

	if settings.MemoryLimit > 0 {
		debug.SetMemoryLimit(settings.MemoryLimit)
	}
	log.Info("starting tidemark", "version", version, "config", settings)
	logPostures(log, settings.TLS)
	if settings.Registry.URL != "" {
		reg := settings.Registry
		reg.Logger = log.With("stage", "schemareg")
		if cfg.Registry, err = schemareg.New(reg); err != nil {
			log.Error("stopped", "err", err)
			return exitConfig
		}
	}
	p := pipeline.New(cfg)
	if cfg.HTTPAddr != "" {
		board := httpapi.NewStatusBoard(cfg, settings.TLS, p, log)
		stop, err := httpapi.Serve(cfg.HTTPAddr, settings.HTTP, version, p, board, log)
		if err != nil {
			log.Error("stopped", "err", err)
			return exitFailed
		}
		defer stop()
		sampled := make(chan struct{})
		bctx, cancel := context.WithCancel(ctx)
		go func() { defer close(sampled); board.Run(bctx) }()
		defer func() { cancel(); <-sampled }()
	}
	if err := supervise.Run(ctx, p, log); err != nil {
		log.Error("stopped", "err", err)
		return exitFailed
	}
	log.Info("stopped")
	return exitOK
}

func newLogger(w io.Writer, s Settings) *slog.Logger {
	opts := &slog.HandlerOptions{Level: s.LogLevel}
	if s.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// resnapshot asks the running service to copy one table again: POST
// /exports/<table>/resnapshot on its HTTP address.
func resnapshot(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "cdc resnapshot: want one table: cdc resnapshot schema.table")
		return exitConfig
	}
	e, err := change.ParseExportID(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "cdc resnapshot: %v\n", err)
		return exitConfig
	}
	base, ok := serviceURL(getenv)
	if !ok {
		fmt.Fprintln(stderr, "cdc resnapshot: set CDC_HTTP_ADDR to the running service's HTTP address (host:port)")
		return exitConfig
	}
	token, err := clientToken(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "cdc resnapshot: %v\n", err)
		return exitConfig
	}
	u := base + "/exports/" + url.PathEscape(e.String()) + "/resnapshot"
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader("{}"))
	if err != nil {
		fmt.Fprintf(stderr, "cdc resnapshot: %v\n", err)
		return exitFailed
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return callService(ctx, "cdc resnapshot", req, http.StatusAccepted, stdout, stderr)
}

// clientToken is the admin token the client commands send: CDC_HTTP_TOKEN, or the content of
// CDC_HTTP_TOKEN_FILE; "" when neither is set.
func clientToken(getenv func(string) string) (string, error) {
	token, file := strings.TrimSpace(getenv("CDC_HTTP_TOKEN")), strings.TrimSpace(getenv("CDC_HTTP_TOKEN_FILE"))
	switch {
	case token != "" && file != "":
		return "", errors.New("CDC_HTTP_TOKEN and CDC_HTTP_TOKEN_FILE are both set: set one of them")
	case file != "":
		t, err := readTokenFile(file)
		if err != nil {
			return "", fmt.Errorf("CDC_HTTP_TOKEN_FILE %s %w", file, err)
		}
		return t, nil
	}
	return token, nil
}

// callService sends one request to the running service and prints its answer: to stdout with
// exit 0 when the status is want, else to stderr with exit 1.
func callService(ctx context.Context, cmd string, req *http.Request, want int, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		fmt.Fprintf(stderr, "%s: the service does not answer: %v\n", cmd, err)
		return exitFailed
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want {
		fmt.Fprintf(stderr, "%s: %s: %s", cmd, resp.Status, body)
		return exitFailed
	}
	fmt.Fprintf(stdout, "%s", body)
	return exitOK
}

// serviceURL is the base URL of the running service's HTTP endpoints, from CDC_HTTP_ADDR (or its
// older name); a wildcard host means this machine.
func serviceURL(getenv func(string) string) (string, bool) {
	addr := getenv("CDC_HTTP_ADDR")
	if addr == "" {
		addr = getenv("CDC_METRICS_ADDR")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), true
}

// health asks the running service whether it is alive (GET /healthz), or with "ready" whether it
// is ready (GET /readyz): exit 0 if so, 1 if not. It is the container's health check.
func health(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	path := "/healthz"
	switch {
	case len(args) == 1 && args[0] == "ready":
		path = "/readyz"
	case len(args) > 0:
		fmt.Fprintln(stderr, "cdc health: usage: cdc health [ready]")
		return exitConfig
	}
	base, ok := serviceURL(getenv)
	if !ok {
		fmt.Fprintln(stderr, "cdc health: set CDC_HTTP_ADDR to the service's HTTP address (host:port)")
		return exitConfig
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "cdc health: %v\n", err)
		return exitFailed
	}
	return callService(ctx, "cdc health", req, http.StatusOK, stdout, stderr)
}
