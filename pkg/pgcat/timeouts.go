package pgcat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Defaults of Timeouts.
const (
	// DefaultConnect bounds a connection attempt: TCP, TLS, authentication and start-up.
	DefaultConnect = 10 * time.Second
	// DefaultReceive is PostgreSQL's wal_receiver_timeout default.
	DefaultReceive = 60 * time.Second
)

// ErrSilent marks a read that heard nothing for the receive timeout: the connection is taken as
// dead. Check with errors.Is.
var ErrSilent = errors.New("no data from the server")

// Timeouts bounds the waits of a connection.
type Timeouts struct {
	// Connect bounds each connection attempt unless the connection string sets connect_timeout;
	// 0 is DefaultConnect.
	Connect time.Duration
	// Receive bounds each wait for the server's next bytes; 0 is no bound.
	Receive time.Duration
}

// Apply sets cfg's connect timeout (when the connection string set none) and, with a receive
// timeout, wraps cfg's dialer so that every connection it makes fails a read that waits longer.
func (t Timeouts) Apply(cfg *pgconn.Config) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = t.Connect
		if cfg.ConnectTimeout <= 0 {
			cfg.ConnectTimeout = DefaultConnect
		}
	}
	if t.Receive <= 0 {
		return
	}
	dial := cfg.DialFunc
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	idle := t.Receive
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Watch(c, idle), nil
	}
}

// ConnectOnly is t without its receive bound: for connections whose commands may wait in
// silence for long, on purpose (a slot creation waiting for open transactions).
func (t Timeouts) ConnectOnly() Timeouts { return Timeouts{Connect: t.Connect} }

// SilentError is the error of a read that heard nothing for Idle. It matches ErrSilent and
// os.ErrDeadlineExceeded, and is a net.Error whose Timeout is true.
type SilentError struct {
	Idle time.Duration
}

func (e *SilentError) Error() string {
	return fmt.Sprintf("no data from the server for %s: the connection is taken as dead", e.Idle)
}

// Is matches ErrSilent and os.ErrDeadlineExceeded.
func (e *SilentError) Is(target error) bool {
	return target == ErrSilent || target == os.ErrDeadlineExceeded
}

// Timeout reports true: the read timed out.
func (e *SilentError) Timeout() bool { return true }

// Temporary reports false (net.Error).
func (e *SilentError) Temporary() bool { return false }

// Watch returns c with every read bounded by idle: a read that waits longer fails with a
// *SilentError. Deadlines set on the returned conn are kept; the earlier one applies.
func Watch(c net.Conn, idle time.Duration) net.Conn {
	return &watchedConn{Conn: c, idle: idle}
}

// watchedConn is a net.Conn whose reads wait at most idle.
type watchedConn struct {
	net.Conn
	idle time.Duration

	// mu orders the deadline of a read with deadlines set from other goroutines (pgconn's
	// context watcher): the last one set is computed from both.
	mu sync.Mutex
	// set is the read deadline the user of the conn set (zero: none).
	set time.Time
}

func (c *watchedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	own := time.Now().Add(c.idle)
	d := own
	if !c.set.IsZero() && c.set.Before(own) {
		d = c.set
	}
	err := c.Conn.SetReadDeadline(d)
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && d.Equal(own) {
		c.mu.Lock()
		mine := c.set.IsZero() || c.set.After(own)
		c.mu.Unlock()
		if mine {
			return n, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: &SilentError{Idle: c.idle}}
		}
	}
	return n, err
}

func (c *watchedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set = t
	return c.Conn.SetReadDeadline(t)
}

func (c *watchedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set = t
	return c.Conn.SetDeadline(t)
}
