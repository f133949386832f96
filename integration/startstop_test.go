package integration

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/integration/fault"
	"github.com/tidemark/cdc/internal/testenv"
)

// Start and stop: connect timeouts, dead paths, signals and the shutdown bound (README,
// "Start and stop"). The tests use the defaults (CDC_CONNECT_TIMEOUT 10s, CDC_SHUTDOWN_TIMEOUT
// 20s) unless they say otherwise.

// silentListener accepts TCP connections (or only lets the kernel accept them, when accept is
// false) and never answers: a server that hangs, or a firewall that swallows the handshake's
// answer.
func silentListener(t testing.TB, accept bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	if accept {
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		}()
	} else {
		close(done)
	}
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestSilentListener: a PostgreSQL or Kafka address that accepts connections and never answers
// gives a clear error and a non-zero exit within the connect timeout (10s by default) and a
// margin, where cdc used to wait for minutes.
func TestSilentListener(t *testing.T) {
	const bound = 10*time.Second + 15*time.Second // CDC_CONNECT_TIMEOUT's default + margin
	t.Run("postgres accepts and never answers", func(t *testing.T) {
		e := newEnv(t)
		vars := e.baseVars()
		addr := silentListener(t, true)
		vars["CDC_PG_URL"] = "postgres://postgres@" + addr + "/tidemark?sslmode=disable"
		res := runCDC(t, vars, 60*time.Second)
		if res.code == 0 {
			t.Errorf("exit code 0, want non-zero")
		}
		if res.took > bound {
			t.Errorf("took %s to give up, want at most %s", res.took.Round(time.Millisecond), bound)
		}
		assertContains(t, res.out, "cannot connect to PostgreSQL", addr, "no answer within the connect timeout of 10s", "CDC_PG_URL")
	})
	t.Run("postgres never accepts", func(t *testing.T) {
		e := newEnv(t)
		vars := e.baseVars()
		addr := silentListener(t, false)
		vars["CDC_PG_URL"] = "postgres://postgres@" + addr + "/tidemark?sslmode=disable"
		res := runCDC(t, vars, 60*time.Second)
		if res.code == 0 {
			t.Errorf("exit code 0, want non-zero")
		}
		if res.took > bound {
			t.Errorf("took %s to give up, want at most %s", res.took.Round(time.Millisecond), bound)
		}
		assertContains(t, res.out, "cannot connect to PostgreSQL", "no answer within the connect timeout")
	})
	t.Run("kafka accepts and never answers", func(t *testing.T) {
		e := newEnv(t)
		e.exec(`CREATE TABLE t (id int PRIMARY KEY)`)
		vars := e.baseVars()
		vars["CDC_TABLES"] = "public.t"
		addr := silentListener(t, true)
		vars["CDC_KAFKA_BROKERS"] = addr
		res := runCDC(t, vars, 90*time.Second)
		if res.code == 0 {
			t.Errorf("exit code 0, want non-zero")
		}
		if res.took > bound {
			t.Errorf("took %s to give up, want at most %s", res.took.Round(time.Millisecond), bound)
		}
		assertContains(t, res.out, "cannot reach Kafka", addr, "no answer within the connect timeout of 10s", "CDC_KAFKA_BROKERS")
		e.assertClean()
	})
}

// TestDeadPath: a proxy in front of PostgreSQL stops forwarding the bytes of every connection
// open through it, without closing them, while new connections pass. cdc (receive timeout 5s)
// drops the silent replication connection, ends its walsender (which would hold the slot until
// wal_sender_timeout), reconnects and goes on while the old connections stay open, and loses
// nothing. It used to stall until the path came back.
func TestDeadPath(t *testing.T) {
	e := newEnv(t)
	e.exec(`CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`,
		`INSERT INTO t SELECT g, 0 FROM generate_series(1, 200) g`)
	u, err := url.Parse(e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := fault.NewProxy("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	vars := e.baseVars()
	vars["CDC_PG_URL"] = u.String()
	vars["CDC_TABLES"] = "public.t"
	vars["CDC_RECEIVE_TIMEOUT"] = "5s"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(t.Context()), "public.t")
	e.exec(`UPDATE t SET v = 1 WHERE id <= 50`)
	e.waitFor(p, time.Minute, e.currentLSN(t.Context()), "public.t")

	stalled := proxy.Stall()
	stalledAt := time.Now()
	t.Logf("stalled %d connections", stalled)
	if stalled == 0 {
		t.Fatal("no connection to stall")
	}
	e.exec(`UPDATE t SET v = 2 WHERE id > 150`, `DELETE FROM t WHERE id <= 10`,
		`INSERT INTO t SELECT g, 3 FROM generate_series(201, 300) g`)
	// The bound: the receive timeout (5s), a reconnect, and a margin for a loaded machine.
	e.waitFor(p, 45*time.Second, e.currentLSN(t.Context()), "public.t")
	t.Logf("watermark past the writes %s after the stall", time.Since(stalledAt).Round(time.Millisecond))
	if n := proxy.Stalled(); n == 0 {
		t.Errorf("no stalled connection is open any more: the test did not keep the dead path open")
	}
	log := p.log.String()
	if testing.Verbose() {
		t.Logf("cdc log:\n%s", tail(log, 6000))
	}
	assertContains(t, log, "replication connection lost; reconnecting", "no change and no keepalive for 5s")

	e.exec(`UPDATE t SET v = v + 10 WHERE id % 3 = 0`, `DELETE FROM t WHERE id BETWEEN 100 AND 120`)
	e.waitFor(p, time.Minute, e.currentLSN(t.Context()), "public.t")
	recs := e.readTopic(e.topic("public.t"))
	checkOrder(t, recs)
	assertSameState(t, "t", materialize(t, recs), e.tableState("t", "id"))
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

// loadWriter commits small transactions on table t (id int PRIMARY KEY, v int) until stopped.
type loadWriter struct {
	stop  chan struct{}
	done  chan struct{}
	txns  atomic.Int64
	err   atomic.Value
	ready chan struct{}
}

func startLoad(t testing.TB, pgURL string) *loadWriter {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	w := &loadWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		for i := int64(1); ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			_, err := conn.Exec(context.Background(), `INSERT INTO t VALUES ($1, 0) ON CONFLICT (id) DO UPDATE SET v = t.v + 1`, 1000+i%5000)
			if err == nil && i%7 == 0 {
				_, err = conn.Exec(context.Background(), `UPDATE t SET v = v + 1 WHERE id = $1`, i%100)
			}
			if err != nil {
				w.err.Store(err)
				return
			}
			w.txns.Add(1)
		}
	}()
	return w
}

func (w *loadWriter) finish(t testing.TB) int64 {
	t.Helper()
	close(w.stop)
	<-w.done
	if err, _ := w.err.Load().(error); err != nil {
		t.Fatalf("writer: %v", err)
	}
	return w.txns.Load()
}

// privateEnv is an env on private servers, which the test may pause.
func privateEnv(t testing.TB, srv *testenv.Servers) *env {
	t.Helper()
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	return &env{t: t, pgURL: srv.NewDB(t), brokers: []string{srv.KafkaAddr()},
		prefix: "it" + suffix + ".startstop", slot: "it_" + suffix, pub: "it_pub"}
}

// TestShutdown: SIGTERM while Kafka hangs (its JVM stopped) under a streaming load. The orderly
// stop cannot drain to Kafka; it used to wait 30s for the drain and up to 10s more to confirm.
// Now it ends within CDC_SHUTDOWN_TIMEOUT (20s by default), a second signal ends it at once, and
// a restart loses nothing.
func TestShutdown(t *testing.T) {
	srv := testenv.StartPrivate(t, testenv.PrivateOptions{})

	// start runs cdc on a fresh database with table t under a writer, until t is hydrated and
	// changes flow.
	start := func(t *testing.T) (*env, *proc, *loadWriter) {
		e := privateEnv(t, srv)
		e.exec(`CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`,
			`INSERT INTO t SELECT g, 0 FROM generate_series(1, 1000) g`)
		vars := e.baseVars()
		vars["CDC_TABLES"] = "public.t"
		p := e.startCDC(vars)
		e.waitFor(p, 2*time.Minute, e.currentLSN(t.Context()), "public.t")
		w := startLoad(t, e.pgURL)
		time.Sleep(2 * time.Second)
		e.waitFor(p, time.Minute, e.currentLSN(t.Context()), "public.t")
		return e, p, w
	}
	// exitWithin waits up to d for p to exit and returns its exit code and how long it took.
	exitWithin := func(t *testing.T, p *proc, d time.Duration) (int, time.Duration) {
		t.Helper()
		begin := time.Now()
		select {
		case <-p.done:
			p.done <- nil
		case <-time.After(d):
			t.Fatalf("cdc still running %s after the signal:\n%s", d, tail(p.log.String(), 3000))
		}
		return p.cmd.ProcessState.ExitCode(), time.Since(begin)
	}
	// restartLosesNothing resumes Kafka, runs cdc again and compares the topic with the table.
	restartLosesNothing := func(t *testing.T, e *env) {
		srv.ResumeKafka()
		vars := e.baseVars()
		vars["CDC_TABLES"] = "public.t"
		p := e.startCDC(vars)
		e.waitFor(p, 2*time.Minute, e.currentLSN(t.Context()), "public.t")
		recs := e.readTopic(e.topic("public.t"))
		checkOrder(t, recs)
		assertSameState(t, "t", materialize(t, recs), e.tableState("t", "id"))
		if code := p.stop(syscall.SIGTERM); code != 0 {
			t.Errorf("exit code of the restarted cdc after SIGTERM = %d, want 0", code)
		}
	}

	t.Run("bound under load", func(t *testing.T) {
		e, p, w := start(t)
		srv.PauseKafka()
		time.Sleep(time.Second)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		// CDC_SHUTDOWN_TIMEOUT's default, and a margin that stays below the 30s of the old
		// drain alone.
		code, took := exitWithin(t, p, 60*time.Second)
		n := w.finish(t)
		t.Logf("exit %d %s after SIGTERM; the writer committed %d transactions", code, took.Round(time.Millisecond), n)
		if testing.Verbose() {
			t.Logf("cdc log:\n%s", tail(p.log.String(), 3000))
		}
		if bound := 20*time.Second + 5*time.Second; took > bound {
			t.Errorf("stopped %s after SIGTERM, want at most %s", took.Round(time.Millisecond), bound)
		}
		restartLosesNothing(t, e)
	})

	t.Run("two signals", func(t *testing.T) {
		e, p, w := start(t)
		srv.PauseKafka()
		time.Sleep(time.Second)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(2 * time.Second)
		if done, _ := p.exited(); done {
			t.Fatalf("cdc stopped within 2s of the first SIGTERM although Kafka hangs: nothing left to show\n%s", tail(p.log.String(), 3000))
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		code, took := exitWithin(t, p, 30*time.Second)
		w.finish(t)
		t.Logf("exit %d %s after the second SIGTERM", code, took.Round(time.Millisecond))
		if took > 3*time.Second {
			t.Errorf("stopped %s after the second SIGTERM, want at once (3s with margin)", took.Round(time.Millisecond))
		}
		if code == 0 {
			t.Errorf("exit code 0 after a forced exit, want non-zero")
		}
		if !strings.Contains(p.log.String(), "second signal: exiting at once") {
			t.Errorf("no log line for the second signal")
		}
		restartLosesNothing(t, e)
	})
}
