package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidemark/cdc/pkg/pipeline"
)

// stopper turns SIGTERM and SIGINT into a stop. The first signal ends the context the command
// works under: cdc run stops in order (drain, confirm) within the shutdown bound. A second signal
// exits at once, and so does the bound passing after the first: nothing past what Kafka holds is
// ever confirmed, so whatever the orderly stop did not finish is sent again at the next start.
type stopper struct {
	sigs   <-chan os.Signal
	cancel context.CancelFunc
	// forced carries the exit code of a second signal or of the bound passing.
	forced chan int
	done   chan struct{}
	once   sync.Once

	log   atomic.Pointer[slog.Logger]
	bound atomic.Int64 // time.Duration
}

// newStopper watches sigs (nil: no signals, as in tests) and returns ctx's child that the first
// signal ends. Logs go to a text logger on stderr until configured says what the service uses.
func newStopper(ctx context.Context, sigs <-chan os.Signal, stderr io.Writer) (context.Context, *stopper) {
	ctx, cancel := context.WithCancel(ctx)
	s := &stopper{sigs: sigs, cancel: cancel, forced: make(chan int, 1), done: make(chan struct{})}
	s.log.Store(slog.New(slog.NewTextHandler(stderr, nil)))
	s.bound.Store(int64(pipeline.DefaultShutdownTimeout))
	if sigs != nil {
		go s.watch()
	}
	return ctx, s
}

// configured sets the logger and the shutdown bound from the configuration.
func (s *stopper) configured(log *slog.Logger, bound time.Duration) {
	s.log.Store(log)
	if bound > 0 {
		s.bound.Store(int64(bound))
	}
}

// close stops watching and ends the context.
func (s *stopper) close() {
	s.once.Do(func() {
		close(s.done)
		s.cancel()
	})
}

func (s *stopper) watch() {
	var bound <-chan time.Time
	for {
		select {
		case <-s.done:
			return
		case sig := <-s.sigs:
			log := s.log.Load()
			if bound != nil {
				log.Error("second signal: exiting at once; what was not confirmed is sent again at the next start", "signal", sig.String())
				s.force(128 + signalNumber(sig))
				return
			}
			d := time.Duration(s.bound.Load())
			log.Info("stopping; a second signal exits at once", "signal", sig.String(), "shutdown_timeout", d.String())
			bound = time.After(d)
			s.cancel()
		case <-bound:
			s.log.Load().Error("the orderly stop did not finish within the shutdown timeout (CDC_SHUTDOWN_TIMEOUT): exiting; what was not confirmed is sent again at the next start",
				"shutdown_timeout", time.Duration(s.bound.Load()).String())
			s.force(exitFailed)
			return
		}
	}
}

func (s *stopper) force(code int) {
	select {
	case s.forced <- code:
	default:
	}
}

// await runs fn and returns its exit code, or the code of a forced exit if that comes first
// (fn's goroutine is then abandoned: the process exits).
func (s *stopper) await(fn func() int) int {
	if s.sigs == nil {
		return fn()
	}
	result := make(chan int, 1)
	go func() { result <- fn() }()
	select {
	case code := <-result:
		return code
	case code := <-s.forced:
		return code
	}
}

// signalNumber is sig's number (SIGINT 2, SIGTERM 15), for the shell's 128+n exit convention.
func signalNumber(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGTERM)
}
