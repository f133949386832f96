package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
)

// tickLoop calls a function every interval on a connection of its own until stopped: the steady
// writer's statements and the WAL sampler's readings.
type tickLoop struct {
	cancel   context.CancelFunc
	done     chan struct{}
	conn     *pgx.Conn
	err      error // valid once done is closed
	stopOnce sync.Once
}

// startTickLoop connects to dbURL and calls tick every interval, i counting from 0. An error of
// tick ends the loop, as the error "<name>: ..." unless ctx ended.
func startTickLoop(ctx context.Context, dbURL, name string, every time.Duration, tick func(ctx context.Context, conn *pgx.Conn, i int) error) (*tickLoop, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	l := &tickLoop{cancel: cancel, done: make(chan struct{}), conn: conn}
	go func() {
		defer close(l.done)
		l.err = l.run(runCtx, name, every, tick)
	}()
	return l, nil
}

func (l *tickLoop) run(ctx context.Context, name string, every time.Duration, tick func(ctx context.Context, conn *pgx.Conn, i int) error) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := tick(ctx, l.conn, i); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

// stop ends the loop, closes its connection and returns its error; later calls return nil.
func (l *tickLoop) stop() error {
	var once bool
	l.stopOnce.Do(func() { once = true })
	if !once {
		return nil
	}
	l.cancel()
	<-l.done
	l.conn.Close(context.Background())
	return l.err
}

// steadyWriter runs one statement a tick until stopped: the steady load of the lag, tables and
// scale scenarios.
type steadyWriter struct {
	txns atomic.Int64
	loop *tickLoop
}

// startSteadyWriter connects to dbURL and runs stmt(i) every interval, i counting from 0.
func startSteadyWriter(ctx context.Context, dbURL string, every time.Duration, stmt func(i int) (string, []any)) (*steadyWriter, error) {
	w := &steadyWriter{}
	loop, err := startTickLoop(ctx, dbURL, "writer", every, func(ctx context.Context, conn *pgx.Conn, i int) error {
		sql, args := stmt(i)
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return err
		}
		w.txns.Add(1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	w.loop = loop
	return w, nil
}

// stop ends the writer, closes its connection and returns its error; later calls return nil.
func (w *steadyWriter) stop() error { return w.loop.stop() }

// walSampler reads the server's WAL position once a tick until stopped, and keeps one sample of
// each reading: what take makes of it (the lag scenario adds the small tables' watermarks, the
// scale scenarios the tracked exports' and cdc's memory).
type walSampler[T any] struct {
	loop    *tickLoop
	samples []T // read once the loop is done
}

// sampleFunc makes the n-th sample (from 0) of a WAL position read at at; it runs on the
// sampler's goroutine.
type sampleFunc[T any] func(ctx context.Context, n int, at time.Time, wal change.LSN) T

// startWALSampler connects to dbURL and starts sampling every interval.
func startWALSampler[T any](ctx context.Context, dbURL string, every time.Duration, take sampleFunc[T]) (*walSampler[T], error) {
	s := &walSampler[T]{}
	loop, err := startTickLoop(ctx, dbURL, "sampler", every, func(ctx context.Context, conn *pgx.Conn, n int) error {
		at := time.Now()
		wal, err := currentLSN(ctx, conn)
		if err != nil {
			return err
		}
		s.samples = append(s.samples, take(ctx, n, at, wal))
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.loop = loop
	return s, nil
}

// stop ends the sampler and returns its samples and its error; a second call returns nothing.
func (s *walSampler[T]) stop() ([]T, error) {
	err := s.loop.stop()
	samples := s.samples
	s.samples = nil
	return samples, err
}
