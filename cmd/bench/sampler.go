package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
)

// walSampler reads the server's WAL position every interval on a connection of its own, until
// stopped, and keeps one sample of each reading: what take makes of it (the lag scenario adds
// the small tables' watermarks, the scale scenarios the tracked exports' and cdc's memory).
type walSampler[T any] struct {
	conn    *pgx.Conn
	cancel  context.CancelFunc
	done    chan struct{}
	samples []T   // read once done is closed
	err     error // likewise
	stopped bool
}

// sampleFunc makes the n-th sample (from 0) of a WAL position read at at; it runs on the
// sampler's goroutine.
type sampleFunc[T any] func(ctx context.Context, n int, at time.Time, wal change.LSN) T

// startWALSampler connects to dbURL and starts sampling every interval.
func startWALSampler[T any](ctx context.Context, dbURL string, every time.Duration, take sampleFunc[T]) (*walSampler[T], error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect sampler: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	s := &walSampler[T]{conn: conn, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = s.run(runCtx, every, take)
	}()
	return s, nil
}

// run samples until ctx ends.
func (s *walSampler[T]) run(ctx context.Context, every time.Duration, take sampleFunc[T]) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		at := time.Now()
		wal, err := currentLSN(ctx, s.conn)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sampler: %w", err)
		}
		s.samples = append(s.samples, take(ctx, n, at, wal))
	}
}

// stop ends the sampler and returns its samples and its error; a second call returns nothing.
func (s *walSampler[T]) stop() ([]T, error) {
	if s.stopped {
		return nil, nil
	}
	s.stopped = true
	s.cancel()
	<-s.done
	s.conn.Close(context.Background())
	return s.samples, s.err
}
