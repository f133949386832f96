package main

import (
	"context"
	"io"
	"os"

	"github.com/tidemark/cdc/internal/shutdown"
	"github.com/tidemark/cdc/pkg/pipeline"
)

// newStopper turns SIGTERM and SIGINT into a stop on cdc's terms (internal/shutdown). The first
// signal ends the context the command works under: cdc run stops in order (drain, confirm)
// within the shutdown bound (CDC_SHUTDOWN_TIMEOUT, set by Configured). A second signal exits at
// once, and so does the bound passing after the first: nothing past what Kafka holds is ever
// confirmed, so whatever the orderly stop did not finish is sent again at the next start.
func newStopper(ctx context.Context, sigs <-chan os.Signal, stderr io.Writer) (context.Context, *shutdown.Stopper) {
	return shutdown.New(ctx, sigs, stderr, shutdown.Options{
		Bound:     pipeline.DefaultShutdownTimeout,
		BoundVar:  "CDC_SHUTDOWN_TIMEOUT",
		Aftermath: "what was not confirmed is sent again at the next start",
	})
}
