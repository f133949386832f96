package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// steadyWriter runs one statement a tick on a connection of its own until stopped: the steady
// load of the lag and tables scenarios.
type steadyWriter struct {
	txns   atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
	conn   *pgx.Conn
	err    error // valid once done is closed

	stopOnce sync.Once
}

// startSteadyWriter connects to dbURL and runs stmt(i) every interval, i counting from 0.
func startSteadyWriter(ctx context.Context, dbURL string, every time.Duration, stmt func(i int) (string, []any)) (*steadyWriter, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect writer: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	w := &steadyWriter{cancel: cancel, done: make(chan struct{}), conn: conn}
	go func() {
		defer close(w.done)
		w.err = w.run(runCtx, every, stmt)
	}()
	return w, nil
}

func (w *steadyWriter) run(ctx context.Context, every time.Duration, stmt func(i int) (string, []any)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		sql, args := stmt(i)
		if _, err := w.conn.Exec(ctx, sql, args...); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("writer: %w", err)
		}
		w.txns.Add(1)
	}
}

// stop ends the writer, closes its connection and returns its error; later calls return nil.
func (w *steadyWriter) stop() error {
	var once bool
	w.stopOnce.Do(func() { once = true })
	if !once {
		return nil
	}
	w.cancel()
	<-w.done
	w.conn.Close(context.Background())
	return w.err
}
