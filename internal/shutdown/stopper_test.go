package shutdown

import (
	"context"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestStopper(t *testing.T) {
	tests := []struct {
		name string
		// signals are sent one after the other, 10ms apart.
		signals []os.Signal
		bound   time.Duration
		want    int
	}{
		{"one signal: the command's own exit", []os.Signal{syscall.SIGTERM}, time.Minute, 0},
		{"one signal, no bound: the command's own exit", []os.Signal{syscall.SIGTERM}, 0, 0},
		{"second SIGTERM exits at once", []os.Signal{syscall.SIGTERM, syscall.SIGTERM}, time.Minute, 128 + 15},
		{"second SIGINT exits at once", []os.Signal{syscall.SIGINT, syscall.SIGINT}, time.Minute, 128 + 2},
		{"second SIGTERM without a bound", []os.Signal{syscall.SIGTERM, syscall.SIGTERM}, 0, 128 + 15},
		{"bound passed after the first", []os.Signal{syscall.SIGTERM}, 50 * time.Millisecond, ExitBound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sigs := make(chan os.Signal, 2)
			ctx, st := New(t.Context(), sigs, io.Discard, Options{Bound: tt.bound, BoundVar: "X_SHUTDOWN_TIMEOUT"})
			defer st.Close()
			st.Configured(slog.New(slog.DiscardHandler), 0)
			// The command stops 300ms after its context ends, unless forced sooner.
			cmd := func() int {
				<-ctx.Done()
				time.Sleep(300 * time.Millisecond)
				return 0
			}
			go func() {
				for _, s := range tt.signals {
					sigs <- s
					time.Sleep(10 * time.Millisecond)
				}
			}()
			if got := st.Await(cmd); got != tt.want {
				t.Errorf("exit code %d, want %d", got, tt.want)
			}
		})
	}
}

func TestStopperWithoutSignals(t *testing.T) {
	ctx, st := New(context.Background(), nil, io.Discard, Options{})
	if got := st.Await(func() int { return 7 }); got != 7 {
		t.Errorf("Await = %d, want the command's 7", got)
	}
	st.Close()
	if ctx.Err() == nil {
		t.Errorf("Close did not end the context")
	}
}
