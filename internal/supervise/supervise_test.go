package supervise

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
)

// fakeServer accepts connections on 127.0.0.1 and hands each to serve.
func fakeServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln.Addr().String()
}

// readStartup reads a PostgreSQL startup packet (answering an SSL request with 'N' first).
func readStartup(c net.Conn) error {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return err
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:4])-8)
		if _, err := io.ReadFull(c, body); err != nil {
			return err
		}
		if binary.BigEndian.Uint32(hdr[4:]) == 80877103 { // SSLRequest
			if _, err := c.Write([]byte{'N'}); err != nil {
				return err
			}
			continue
		}
		return nil
	}
}

// pgError writes an ErrorResponse with severity FATAL and code.
func pgError(c net.Conn, code, msg string) {
	var body []byte
	for _, f := range []struct {
		t byte
		v string
	}{{'S', "FATAL"}, {'V', "FATAL"}, {'C', code}, {'M', msg}} {
		body = append(body, f.t)
		body = append(body, f.v...)
		body = append(body, 0)
	}
	body = append(body, 0)
	out := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(body)+4))
	c.Write(append(out, body...))
}

func pgConnect(t *testing.T, addr string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/db?sslmode=disable&connect_timeout=3")
	if err == nil {
		conn.Close(ctx)
		t.Fatal("connected to a fake server that never accepts a login")
	}
	return err
}

func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestConnectionLost classifies the errors pgx and franz-go return for what a server or the
// network did, from real sockets.
func TestConnectionLost(t *testing.T) {
	reset := fakeServer(t, func(c net.Conn) {
		readStartup(c)
		c.(*net.TCPConn).SetLinger(0) // close with RST
		c.Close()
	})
	closed := fakeServer(t, func(c net.Conn) {
		readStartup(c)
		c.Close()
	})
	starting := fakeServer(t, func(c net.Conn) {
		readStartup(c)
		pgError(c, "57P03", "the database system is starting up")
		c.Close()
	})
	badPassword := fakeServer(t, func(c net.Conn) {
		readStartup(c)
		pgError(c, "28P01", `password authentication failed for user "postgres"`)
		c.Close()
	})
	noDatabase := fakeServer(t, func(c net.Conn) {
		readStartup(c)
		pgError(c, "3D000", `database "db" does not exist`)
		c.Close()
	})
	for _, tc := range []struct {
		name string
		addr string
		lost bool
	}{
		{"reset after the startup packet", reset, true},
		{"closed after the startup packet", closed, true},
		{"server starting up (57P03)", starting, true},
		{"refused dial", closedAddr(t), false},
		{"wrong password (28P01)", badPassword, false},
		{"no such database (3D000)", noDatabase, false},
	} {
		err := pgConnect(t, tc.addr)
		if got := connectionLost(err); got != tc.lost {
			t.Errorf("postgres, %s: connectionLost(%v) = %v, want %v", tc.name, err, got, tc.lost)
		}
	}

	// A connection reset in the middle of a query: what a cut proxy does to a pipeline that
	// had just started, as wrapped by the code that ran the query.
	conn, err := net.Dial("tcp", reset)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), 196608))
	_, err = io.ReadFull(conn, make([]byte, 1))
	if err = fmt.Errorf("read slot s: %w", err); !connectionLost(err) {
		t.Errorf("connectionLost(%v) = false, want true", err)
	}

	// A connection reset while pgx waits for a query's answer. pgx's simple-protocol Exec drops
	// the read error and returns "conn closed" (pgcat.ErrConnClosed), as CREATE PUBLICATION did
	// in TestStartupConnectionsCut; the next query on the connection gets the same error.
	resetOnQuery := fakeServer(t, func(c net.Conn) {
		if readStartup(c) != nil {
			return
		}
		c.Write([]byte{'R', 0, 0, 0, 8, 0, 0, 0, 0, 'Z', 0, 0, 0, 5, 'I'}) // AuthenticationOk, ReadyForQuery
		var hdr [5]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		io.ReadFull(c, make([]byte, binary.BigEndian.Uint32(hdr[1:])-4))
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	})
	pg, err := pgx.Connect(t.Context(), "postgres://postgres@"+resetOnQuery+"/db?sslmode=disable&connect_timeout=3")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	for _, what := range []string{"the query the reset cut", "the next query"} {
		_, err := pg.Exec(t.Context(), "CREATE PUBLICATION p FOR TABLE t")
		err = fmt.Errorf("create publication p: %w", err)
		t.Logf("%s: %v", what, err)
		if !connectionLost(err) {
			t.Errorf("%s: connectionLost(%v) = false, want true", what, err)
		}
	}

	// A broker that closes every connection before its first answer: franz-go's
	// ErrFirstReadEOF, most often TLS or SASL missing. Configuration, not a lost connection.
	broker := fakeServer(t, func(c net.Conn) {
		c.Read(make([]byte, 64))
		c.Close()
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RetryTimeout(time.Second), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err = cl.Ping(ctx)
	if _, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); !ok {
		t.Fatalf("ping of a broker that closes at once: %v, want a kgo.ErrFirstReadEOF", err)
	}
	if connectionLost(err) {
		t.Errorf("connectionLost(%v) = true, want false", err)
	}
}

func TestExitNow(t *testing.T) {
	lost := fmt.Errorf("read slot s: write failed: %w", &net.OpError{Op: "write", Net: "tcp", Err: io.ErrUnexpectedEOF})
	refused := pgConnect(t, closedAddr(t))
	for _, tc := range []struct {
		name    string
		err     error
		attempt int
		ran     bool
		elapsed time.Duration
		exit    bool
	}{
		{"unreachable at start", refused, 1, false, time.Second, true},
		{"connection lost at start", lost, 1, false, time.Second, false},
		{"unreachable on a later attempt", refused, 2, false, time.Second, false},
		{"unreachable after the start-up window", refused, 1, false, 16 * time.Second, false},
		{"silent until the connect timeout", fmt.Errorf("connect: %w", context.DeadlineExceeded), 1, false, 11 * time.Second, true},
		{"a dead path at start", fmt.Errorf("read: %w", &pgcat.SilentError{Idle: time.Minute}), 1, false, time.Second, false},
		{"unreachable after the stages ran", refused, 1, true, time.Second, false},
		{"fenced with no other instance", fmt.Errorf("commit: %w", sink.ErrFenced), 1, false, time.Second, false},
		{"fatal", fmt.Errorf("bad: %w", pipeline.ErrFatal), 3, true, time.Minute, true},
		{"fatal lost connection", fmt.Errorf("%w: %w", pipeline.ErrFatal, lost), 1, false, time.Second, true},
		{"slot lost", fmt.Errorf("x: %w", replication.ErrSlotLost), 5, true, time.Hour, true},
		{"setup", fmt.Errorf("x: %w", replication.ErrSetup), 2, false, time.Second, true},
		{"refused by an ACL while running", fmt.Errorf("produce: %w", kerr.TopicAuthorizationFailed), 4, true, time.Hour, true},
		{"transactional id refused", fmt.Errorf("init producer id: %w", kerr.TransactionalIDAuthorizationFailed), 2, false, time.Second, true},
	} {
		if got := exitNow(tc.err, tc.attempt, tc.ran, tc.elapsed, 15*time.Second); got != tc.exit {
			t.Errorf("%s: exitNow = %v, want %v (err %v)", tc.name, got, tc.exit, tc.err)
		}
	}
}
