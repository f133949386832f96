package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/secret"
)

// Defaults of APPLY_CONNECT_TIMEOUT and APPLY_RECEIVE_TIMEOUT (a config built without
// loadConfig, as in tests, gets these).
const (
	defaultConnectTimeout = pgcat.DefaultConnect
	defaultReceiveTimeout = pgcat.DefaultReceive
)

// connectTarget opens a connection to the target PostgreSQL, bounded as cdc bounds its own
// (pgcat.Timeouts): each attempt waits at most APPLY_CONNECT_TIMEOUT (unless APPLY_TARGET_URL
// sets connect_timeout), and a read that hears nothing for APPLY_RECEIVE_TIMEOUT fails, the
// connection taken as dead. Its error names the server, says what to check, and holds no
// secret; the session that gets it ends and is restarted with backoff, and that is logged.
func connectTarget(ctx context.Context, cfg config) (*pgx.Conn, error) {
	return connectTargetFor(ctx, cfg, false)
}

// connectLoader is connectTarget for the loads' connection, whose statements may run long in
// silence on purpose (a re-copy deletes a large table's rows, COPY ends with a long wait for
// the last rows): instead of a bound on silence, TCP keepalives find a dead path within
// APPLY_RECEIVE_TIMEOUT (the server's kernel answers them while a statement runs).
func connectLoader(ctx context.Context, cfg config) (*pgx.Conn, error) {
	return connectTargetFor(ctx, cfg, true)
}

func connectTargetFor(ctx context.Context, cfg config, long bool) (*pgx.Conn, error) {
	pc, err := pgx.ParseConfig(cfg.targetURL)
	if err != nil { // loadConfig parsed it already
		return nil, fmt.Errorf("APPLY_TARGET_URL: %w", secret.ScrubError(err, cfg.targetURL))
	}
	t := pgcat.Timeouts{Connect: cfg.connectTimeout, Receive: cfg.receiveTimeout}
	if t.Connect <= 0 {
		t.Connect = defaultConnectTimeout
	}
	if t.Receive <= 0 {
		t.Receive = defaultReceiveTimeout
	}
	if long {
		r := t.Receive
		d := net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: max(r/4, time.Second), Interval: max(r/12, time.Second), Count: 9}}
		pc.DialFunc = d.DialContext
		t = t.ConnectOnly()
	}
	t.Apply(&pc.Config)
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, explainTarget(ctx, err, pc.Host, pc.Port, pc.Database, pc.ConnectTimeout, cfg.targetURL)
	}
	return conn, nil
}

// explainTarget turns a failed connection attempt into an error that says what to check. The
// whole text is scrubbed of the connection string's passwords: a mistyped host may hold a
// piece of one.
func explainTarget(ctx context.Context, err error, host string, port uint16, database string, timeout time.Duration, url string) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("cannot connect to the target PostgreSQL at %s:%d database %s: no answer within the connect timeout of %s (%w); check APPLY_TARGET_URL and that the server is running and reachable",
			host, port, database, timeout, err)
	} else {
		err = fmt.Errorf("cannot connect to the target PostgreSQL at %s:%d database %s: %w; check APPLY_TARGET_URL and that the server is running",
			host, port, database, err)
	}
	return secret.ScrubError(err, url)
}
