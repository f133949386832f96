package shutdown

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ExitBound is the exit code when the orderly stop outlasts the bound.
const ExitBound = 1

// Options are a command's terms for stopping.
type Options struct {
	// Bound is how long the orderly stop may take after the first signal before the process
	// exits with ExitBound; 0 is no bound (only a second signal forces the exit).
	Bound time.Duration
	// BoundVar names the variable that sets Bound, for the log line when it passes.
	BoundVar string
	// Aftermath says what a forced exit leaves for the next start, e.g. "what was not
	// confirmed is sent again at the next start".
	Aftermath string
}

// Stopper watches the signals of one command. Its zero value is not usable: call New.
type Stopper struct {
	sigs   <-chan os.Signal
	cancel context.CancelFunc
	opts   Options
	// forced carries the exit code of a second signal or of the bound passing.
	forced chan int
	done   chan struct{}
	once   sync.Once

	log   atomic.Pointer[slog.Logger]
	bound atomic.Int64 // time.Duration
}

// New watches sigs (nil: no signals, as in tests) and returns ctx's child that the first signal
// ends. Logs go to a text logger on stderr until Configured says what the command uses.
func New(ctx context.Context, sigs <-chan os.Signal, stderr io.Writer, opts Options) (context.Context, *Stopper) {
	ctx, cancel := context.WithCancel(ctx)
	s := &Stopper{sigs: sigs, cancel: cancel, opts: opts, forced: make(chan int, 1), done: make(chan struct{})}
	s.log.Store(slog.New(slog.NewTextHandler(stderr, nil)))
	s.bound.Store(int64(opts.Bound))
	if sigs != nil {
		go s.watch()
	}
	return ctx, s
}

// Configured sets the logger and, when bound > 0, the shutdown bound from the configuration.
func (s *Stopper) Configured(log *slog.Logger, bound time.Duration) {
	s.log.Store(log)
	if bound > 0 {
		s.bound.Store(int64(bound))
	}
}

// Close stops watching and ends the context.
func (s *Stopper) Close() {
	s.once.Do(func() {
		close(s.done)
		s.cancel()
	})
}

func (s *Stopper) watch() {
	var bound <-chan time.Time
	stopping := false
	for {
		select {
		case <-s.done:
			return
		case sig := <-s.sigs:
			log := s.log.Load()
			if stopping {
				log.Error("second signal: exiting at once; "+s.opts.Aftermath, "signal", sig.String())
				s.force(128 + SignalNumber(sig))
				return
			}
			stopping = true
			attrs := []any{"signal", sig.String()}
			if d := time.Duration(s.bound.Load()); d > 0 {
				attrs = append(attrs, "shutdown_timeout", d.String())
				bound = time.After(d)
			}
			log.Info("stopping; a second signal exits at once", attrs...)
			s.cancel()
		case <-bound:
			s.log.Load().Error("the orderly stop did not finish within the shutdown timeout ("+s.opts.BoundVar+"): exiting; "+s.opts.Aftermath,
				"shutdown_timeout", time.Duration(s.bound.Load()).String())
			s.force(ExitBound)
			return
		}
	}
}

func (s *Stopper) force(code int) {
	select {
	case s.forced <- code:
	default:
	}
}

// Await runs fn and returns its exit code, or the code of a forced exit if that comes first
// (fn's goroutine is then abandoned: the caller exits the process).
func (s *Stopper) Await(fn func() int) int {
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

// SignalNumber is sig's number (SIGINT 2, SIGTERM 15), for the shell's 128+n exit convention.
func SignalNumber(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGTERM)
}
