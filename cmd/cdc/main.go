// Command cdc is Tidemark: PostgreSQL logical replication to Kafka, one topic per table, with a
// watermark per table. Configuration comes only from CDC_* environment variables; `cdc help`
// lists them.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tidemark/cdc/pkg/pipeline"
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; main only supplies the process's environment.
func run(ctx context.Context, args []string, getenv func(string) string, environ []string, stdout, stderr io.Writer) int {
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
	case "run", "watermarks":
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

	if cmd == "watermarks" {
		if err := pipeline.PrintWatermarks(ctx, cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "cdc watermarks: %v\n", err)
			return exitFailed
		}
		return exitOK
	}

	log.Info("starting tidemark", "version", version, "config", settings)
	if err := pipeline.Run(ctx, cfg); err != nil {
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
