package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/integration/fault"
	"github.com/tidemark/cdc/internal/testenv"
)

// The applier hardened as cdc is (issue 29): tables chosen explicitly, bounded connection
// attempts that are logged and retried, TLS postures, a second signal, a superuser warning and a
// health check that sees a stall. Each test runs the built tidemark-apply from outside.

// applyVars are the variables every applier of these tests gets: the target, the tables, cdc's
// Kafka and prefix, text logs.
func (e *env) applyVars(target, tables string) map[string]string {
	return map[string]string{
		"APPLY_TARGET_URL":  target,
		"APPLY_TABLES":      tables,
		"CDC_KAFKA_BROKERS": strings.Join(e.brokers, ","),
		"CDC_TOPIC_PREFIX":  e.prefix,
		"APPLY_LOG_FORMAT":  "text",
	}
}

// runApply runs tidemark-apply with vars until it exits, failing the test when it is still
// running after timeout.
func runApply(t testing.TB, vars map[string]string, timeout time.Duration) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, applyBinary)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + t.TempDir()}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	res := runResult{out: out.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("tidemark-apply still running after %s; output:\n%s", timeout, tail(res.out, 4000))
	}
	if _, ok := errors.AsType[*exec.ExitError](err); err != nil && !ok {
		t.Fatalf("run tidemark-apply: %v", err)
	}
	res.code = cmd.ProcessState.ExitCode()
	t.Logf("tidemark-apply: exit %d after %s:\n%s", res.code, res.took.Round(time.Millisecond), tail(res.out, 3000))
	return res
}

// countingListener accepts TCP connections, closes each at once and counts them: a server that
// must not be dialled.
func countingListener(t testing.TB) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String(), &n
}

// waitLogCount waits until p's log holds s at least n times and returns how long that took
// from since; it fails the test after timeout.
func waitLogCount(t testing.TB, p *proc, s string, n int, since time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for strings.Count(p.log.String(), s) < n {
		if done, err := p.exited(); done {
			t.Fatalf("tidemark-apply exited (%v) before logging %q %d times; log:\n%s", err, s, n, tail(p.log.String(), 6000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("tidemark-apply did not log %q %d times within %s; log:\n%s", s, n, timeout, tail(p.log.String(), 6000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(since)
}

// logLines returns the lines of log that contain s.
func logLines(log, s string) []string {
	var out []string
	for line := range strings.SplitSeq(log, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// TestApplyTableChoice: the applier applies only what it is told to. Without APPLY_TABLES it
// used to apply every table the watermark topic names; now that is a configuration problem
// (exit 2, before anything connects) unless APPLY_ALL_TABLES=true asks for it, and PostgreSQL's
// own schemas are refused.
func TestApplyTableChoice(t *testing.T) {
	t.Run("no tables is refused before connecting", func(t *testing.T) {
		e := newEnv(t)
		target, dialled := countingListener(t)
		vars := e.applyVars("postgres://app:"+secret+"@"+target+"/replica?sslmode=disable", "")
		delete(vars, "APPLY_TABLES")
		res := runApply(t, vars, 20*time.Second)
		if res.code != 2 {
			t.Errorf("exit code %d, want 2", res.code)
		}
		assertContains(t, res.out, "APPLY_TABLES: required", "APPLY_ALL_TABLES=true")
		assertNoSecret(t, res.out)
		if n := dialled.Load(); n != 0 {
			t.Errorf("the target was dialled %d times", n)
		}
	})
	t.Run("system schemas refused", func(t *testing.T) {
		e := newEnv(t)
		target, dialled := countingListener(t)
		vars := e.applyVars("postgres://app@"+target+"/replica?sslmode=disable", "public.t,pg_catalog.pg_class,information_schema.tables")
		vars["APPLY_TARGET_SCHEMA"] = "pg_toast"
		res := runApply(t, vars, 20*time.Second)
		if res.code != 2 {
			t.Errorf("exit code %d, want 2", res.code)
		}
		assertContains(t, res.out, `APPLY_TABLES="pg_catalog.pg_class": pg_catalog is a system schema`,
			`APPLY_TABLES="information_schema.tables": information_schema is a system schema`, `APPLY_TARGET_SCHEMA="pg_toast": a system schema`)
		if n := dialled.Load(); n != 0 {
			t.Errorf("the target was dialled %d times", n)
		}
	})
	t.Run("all tables when asked", func(t *testing.T) {
		e := newEnv(t)
		e.exec(`CREATE TABLE a (id int PRIMARY KEY, v text)`, `CREATE TABLE b (id int PRIMARY KEY, v text)`,
			`INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 20) g`, `INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 30) g`,
			`CREATE PUBLICATION it_pub FOR TABLE a, b`)
		replica := testenv.NewDB(t)
		testenv.Exec(t, replica, `CREATE TABLE a (id int PRIMARY KEY, v text)`, `CREATE TABLE b (id int PRIMARY KEY, v text)`)
		p := e.startCDC(e.baseVars())
		vars := e.applyVars(replica, "")
		delete(vars, "APPLY_TABLES")
		vars["APPLY_ALL_TABLES"] = "true"
		a := e.startBinary(applyBinary, vars)
		e.waitFor(p, 2*time.Minute, e.currentLSN(t.Context()), "public.a", "public.b")
		e.exec(`INSERT INTO a VALUES (21, 'late')`, `DELETE FROM b WHERE id > 25`)
		e.waitFor(p, time.Minute, e.currentLSN(t.Context()), "public.a", "public.b")
		waitRows(t, a, replica, map[string]int{"a": 21, "b": 25}, time.Minute)
	})
}

// waitRows waits until each table of the database at url has its count of rows.
func waitRows(t testing.TB, p *proc, url string, want map[string]int, timeout time.Duration) {
	t.Helper()
	conn := testenv.Conn(t, url)
	defer conn.Close(context.Background())
	deadline := time.Now().Add(timeout)
	for {
		got := map[string]int{}
		for table := range want {
			var n int
			if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
				t.Fatalf("count %s: %v", table, err)
			}
			got[table] = n
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if done, err := p.exited(); done {
			t.Fatalf("tidemark-apply exited (%v); rows %v, want %v; log:\n%s", err, got, want, tail(p.log.String(), 6000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows %v after %s, want %v; log:\n%s", got, timeout, want, tail(p.log.String(), 6000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestApplySilentPeers: a target PostgreSQL or a Kafka broker that accepts connections and never
// answers. The applier used to wait in silence; now each attempt gives up within the connect
// timeout (APPLY_CONNECT_TIMEOUT, 10s by default), logs why at WARN without the password, and
// tries again after a backoff.
func TestApplySilentPeers(t *testing.T) {
	const bound = 10*time.Second + 15*time.Second // the default connect timeout + margin
	t.Run("target accepts and never answers", func(t *testing.T) {
		e := newEnv(t)
		addr := silentListener(t, true)
		start := time.Now()
		p := e.startBinary(applyBinary, e.applyVars("postgres://app:"+secret+"@"+addr+"/replica?sslmode=disable", "public.t"))
		const ended = "session ended; restarting"
		first := waitLogCount(t, p, ended, 1, start, bound)
		second := waitLogCount(t, p, ended, 2, start, 2*bound)
		lines := logLines(p.log.String(), ended)
		t.Logf("REPORT silent target: first attempt given up %s after the start, the second %s after the first; %s",
			first.Round(time.Millisecond), (second - first).Round(time.Millisecond), lines[0])
		if first < 5*time.Second {
			t.Errorf("gave up after %s: not the connect timeout", first)
		}
		for _, w := range []string{"level=WARN", "cannot connect to the target PostgreSQL at " + addr, "no answer within the connect timeout of 10s", "APPLY_TARGET_URL", "backoff="} {
			if !strings.Contains(lines[0], w) {
				t.Errorf("the log line lacks %q: %s", w, lines[0])
			}
		}
		assertNoSecret(t, p.log.String())
	})
	t.Run("kafka accepts and never answers", func(t *testing.T) {
		e := newEnv(t)
		replica := testenv.NewDB(t)
		addr := silentListener(t, true)
		vars := e.applyVars(replica, "public.t")
		vars["CDC_KAFKA_BROKERS"] = addr
		p := e.startBinary(applyBinary, vars)
		// The session reaches Kafka once it has read the (empty) progress row.
		reached := time.Now()
		waitLogCount(t, p, "no progress recorded", 1, reached, bound)
		reached = time.Now()
		const ended = "session ended; restarting"
		first := waitLogCount(t, p, ended, 1, reached, bound)
		second := waitLogCount(t, p, ended, 2, reached, 2*bound)
		lines := logLines(p.log.String(), ended)
		t.Logf("REPORT silent Kafka: first attempt given up %s after the session reached Kafka, the second %s after the first; %s",
			first.Round(time.Millisecond), (second - first).Round(time.Millisecond), lines[0])
		for _, w := range []string{"level=WARN", "cannot reach Kafka at " + addr, "no answer within the connect timeout of 10s", "CDC_KAFKA_BROKERS"} {
			if !strings.Contains(lines[0], w) {
				t.Errorf("the log line lacks %q: %s", w, lines[0])
			}
		}
	})
}

// TestApplyPosture: at start the applier says, one line per connection, how the target and
// Kafka are protected, and warns when they are not; APPLY_REQUIRE_TLS=true refuses such a
// configuration (exit 2) before anything connects. A superuser target role is warned about
// once; a least-privilege role is not.
func TestApplyPosture(t *testing.T) {
	t.Run("warnings", func(t *testing.T) {
		e := newEnv(t)
		vars := e.applyVars("postgres://app:"+secret+"@db.invalid:5432/replica", "public.t")
		vars["CDC_KAFKA_SASL_MECHANISM"] = "PLAIN"
		vars["CDC_KAFKA_SASL_USERNAME"] = "app"
		vars["CDC_KAFKA_SASL_PASSWORD"] = "sasl-" + secret
		p := e.startBinary(applyBinary, vars)
		waitLogCount(t, p, "Kafka: not encrypted", 1, time.Now(), 20*time.Second)
		p.stop(syscall.SIGTERM)
		log := p.log.String()
		for _, want := range []string{
			`level=WARN msg="target PostgreSQL: encrypted only if the server offers TLS, else plaintext; server certificate not verified (sslmode=prefer, the default): anyone in the path can impersonate the server or force plaintext"`,
			`fix="add sslmode=verify-full and sslrootcert=<CA file> to APPLY_TARGET_URL`,
			`level=WARN msg="Kafka: not encrypted (CDC_KAFKA_TLS=false); SASL PLAIN: the PLAIN credentials cross the network in plaintext"`,
		} {
			if !strings.Contains(log, want) {
				t.Errorf("log lacks %s", want)
			}
		}
		assertNoSecret(t, log)
	})
	t.Run("require TLS refuses before connecting", func(t *testing.T) {
		e := newEnv(t)
		target, targetDialled := countingListener(t)
		broker, brokerDialled := countingListener(t)
		for _, tc := range []struct {
			target string
			want   []string
		}{
			// A loopback target is accepted in plaintext: nothing crosses the network.
			{"postgres://app@" + target + "/replica?sslmode=disable", []string{"CDC_KAFKA_TLS: APPLY_REQUIRE_TLS=true, but Kafka is not encrypted"}},
			{"postgres://app:" + secret + "@db.invalid/replica?sslmode=require", []string{
				"APPLY_TARGET_URL: APPLY_REQUIRE_TLS=true, but target PostgreSQL is encrypted, server certificate not verified (sslmode=require): anyone in the path can impersonate the server",
				"CDC_KAFKA_TLS: APPLY_REQUIRE_TLS=true, but Kafka is not encrypted"}},
		} {
			vars := e.applyVars(tc.target, "public.t")
			vars["CDC_KAFKA_BROKERS"] = broker
			vars["APPLY_REQUIRE_TLS"] = "true"
			res := runApply(t, vars, 20*time.Second)
			if res.code != 2 {
				t.Errorf("exit code %d, want 2", res.code)
			}
			assertContains(t, res.out, tc.want...)
			assertNoSecret(t, res.out)
		}
		if n, m := targetDialled.Load(), brokerDialled.Load(); n != 0 || m != 0 {
			t.Errorf("dialled the target %d times and Kafka %d times", n, m)
		}
	})
	t.Run("superuser warned and least privilege not", func(t *testing.T) {
		e := newEnv(t)
		replica := testenv.NewDB(t)
		role := "tm_apply_" + strings.ReplaceAll(e.slot, "it_", "")
		u, err := url.Parse(replica)
		if err != nil {
			t.Fatal(err)
		}
		// CREATE on the database: the applier runs CREATE SCHEMA IF NOT EXISTS for the
		// progress table's schema, which PostgreSQL checks even when the schema exists.
		testenv.Exec(t, replica, fmt.Sprintf(`CREATE ROLE %s LOGIN`, role), fmt.Sprintf(`GRANT CREATE ON SCHEMA public TO %s`, role),
			fmt.Sprintf(`GRANT CREATE ON DATABASE %s TO %s`, strings.TrimPrefix(u.Path, "/"), role))
		t.Cleanup(func() {
			testenv.Exec(t, replica, fmt.Sprintf(`DROP OWNED BY %s`, role), fmt.Sprintf(`DROP ROLE %s`, role))
		})
		least := *u
		least.User = url.User(role)
		for _, tc := range []struct {
			role, target string
			warned       bool
		}{{"postgres", testenv.NewDB(t), true}, {role, least.String(), false}} {
			p := e.startBinary(applyBinary, e.applyVars(tc.target, "public.t"))
			// Past the role check: the progress row is read.
			waitLogCount(t, p, "no progress recorded", 1, time.Now(), 30*time.Second)
			p.stop(syscall.SIGTERM)
			log := p.log.String()
			if got := strings.Count(log, "the target role is a superuser"); got != map[bool]int{true: 1, false: 0}[tc.warned] {
				t.Errorf("role %s: %d superuser warnings, want one: %v", tc.role, got, tc.warned)
			}
			if !strings.Contains(log, `level=INFO msg="target PostgreSQL: not encrypted (sslmode=disable); loopback only, nothing crosses the network"`) {
				t.Errorf("no posture line for the loopback target:\n%s", tail(log, 3000))
			}
			if tc.warned && !strings.Contains(log, "docs/production.md") {
				t.Errorf("the superuser warning does not point to docs/production.md")
			}
		}
	})
}

// TestApplySecondSignal: an applier whose orderly stop hangs (a table's load is open on the
// loads' connection, waiting for the other chosen table, when every connection to the target
// goes silent: rolling the load back waits for an answer). A second SIGTERM exits at once, with
// 128+15; without one, the receive timeout ends each connection's wait. The applier used to
// ignore the second signal and wait for ever.
func TestApplySecondSignal(t *testing.T) {
	// start runs cdc publishing b, and an applier choosing b and never (which is not published,
	// so the first cut never comes and b's load stays open), its target behind a proxy; it
	// returns once b's load is applied.
	start := func(t *testing.T, extra map[string]string) (*proc, *fault.Proxy) {
		e := newEnv(t)
		e.exec(`CREATE TABLE b (id int PRIMARY KEY, v text)`, `CREATE TABLE never (id int PRIMARY KEY)`,
			`INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 500) g`, `CREATE PUBLICATION it_pub FOR TABLE b`)
		replica := testenv.NewDB(t)
		testenv.Exec(t, replica, `CREATE TABLE b (id int PRIMARY KEY, v text)`, `CREATE TABLE never (id int PRIMARY KEY)`)
		u, err := url.Parse(replica)
		if err != nil {
			t.Fatal(err)
		}
		proxy, err := fault.NewProxy("127.0.0.1:0", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		u.Host = proxy.Addr()
		e.startCDC(e.baseVars())
		vars := e.applyVars(u.String(), "public.b,public.never")
		for k, v := range extra {
			vars[k] = v
		}
		a := e.startBinary(applyBinary, vars)
		waitLogCount(t, a, "table loaded: it joins with the next cut that reaches it", 1, time.Now(), 2*time.Minute)
		return a, proxy
	}
	exitWithin := func(t *testing.T, p *proc, d time.Duration) (int, time.Duration) {
		t.Helper()
		begin := time.Now()
		select {
		case <-p.done:
			p.done <- nil
		case <-time.After(d):
			t.Fatalf("tidemark-apply still running %s after the signal:\n%s", d, tail(p.log.String(), 3000))
		}
		return p.cmd.ProcessState.ExitCode(), time.Since(begin)
	}

	t.Run("second SIGTERM exits at once", func(t *testing.T) {
		a, proxy := start(t, nil)
		if n := proxy.Stall(); n == 0 {
			t.Fatal("no connection to stall")
		}
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(2 * time.Second)
		if done, _ := a.exited(); done {
			t.Fatalf("tidemark-apply stopped within 2s of the first SIGTERM: its stop did not hang, nothing to show\n%s", tail(a.log.String(), 3000))
		}
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		code, took := exitWithin(t, a, 20*time.Second)
		t.Logf("REPORT second SIGTERM: exit %d %s after it", code, took.Round(time.Millisecond))
		if took > 3*time.Second {
			t.Errorf("stopped %s after the second SIGTERM, want at once (3s with margin)", took.Round(time.Millisecond))
		}
		if code != 128+15 {
			t.Errorf("exit code %d after the second SIGTERM, want %d", code, 128+15)
		}
		if !strings.Contains(a.log.String(), "second signal: exiting at once") {
			t.Errorf("no log line for the second signal")
		}
	})
	t.Run("one SIGTERM ends with the receive timeout", func(t *testing.T) {
		a, proxy := start(t, map[string]string{"APPLY_RECEIVE_TIMEOUT": "5s"})
		if n := proxy.Stall(); n == 0 {
			t.Fatal("no connection to stall")
		}
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		code, took := exitWithin(t, a, 30*time.Second)
		t.Logf("REPORT one SIGTERM, APPLY_RECEIVE_TIMEOUT=5s: exit %d %s after it", code, took.Round(time.Millisecond))

		if code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
		// The rollbacks wait at most the receive timeout, and the loads' connection's close as long.
		if took > 20*time.Second {
			t.Errorf("stopped %s after SIGTERM, want about twice the receive timeout (5s)", took.Round(time.Millisecond))
		}
	})
}

// TestApplyStallHealth: the target blocks the applier (the test holds a lock on the target
// table) while cdc goes on. /healthz, which used to answer ok whatever happened, answers 503
// with the reason once nothing was applied for APPLY_STALL_AFTER (10s here) while the
// watermarks moved, and ok again once the lock is gone.
func TestApplyStallHealth(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(`CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`, `INSERT INTO t SELECT g, 0 FROM generate_series(1, 100) g`,
		`CREATE PUBLICATION it_pub FOR TABLE t`)
	replica := testenv.NewDB(t)
	testenv.Exec(t, replica, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	p := e.startCDC(e.baseVars())
	httpAddr := freeAddr(t)
	vars := e.applyVars(replica, "public.t")
	vars["APPLY_STALL_AFTER"] = "10s"
	vars["APPLY_HTTP_ADDR"] = httpAddr
	a := e.startBinary(applyBinary, vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.t")
	waitRows(t, a, replica, map[string]int{"t": 100}, time.Minute)
	healthz := func() (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err != nil {
			t.Fatalf("GET /healthz: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := healthz(); code != http.StatusOK {
		t.Fatalf("/healthz before the stall: %d %s", code, body)
	}

	lock := testenv.Conn(t, replica)
	defer lock.Close(context.Background())
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `LOCK TABLE t IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO t VALUES (101, 1)`)
	locked := time.Now()
	var unavailable time.Duration
	var reason string
	for deadline := locked.Add(45 * time.Second); ; {
		code, body := healthz()
		if code == http.StatusServiceUnavailable {
			unavailable, reason = time.Since(locked), body
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still %d %q %s after the target blocked the applier (APPLY_STALL_AFTER=10s)", code, body, time.Since(locked).Round(time.Millisecond))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !strings.Contains(reason, "stalled") || !strings.Contains(reason, "APPLY_STALL_AFTER 10s") {
		t.Errorf("503 without the reason: %q", reason)
	}
	if unavailable < 10*time.Second {
		t.Errorf("503 after %s, before APPLY_STALL_AFTER", unavailable)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	var available time.Duration
	for deadline := released.Add(30 * time.Second); ; {
		code, body := healthz()
		if code == http.StatusOK {
			available = time.Since(released)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still %d %q %s after the lock was released", code, body, time.Since(released).Round(time.Millisecond))
		}
		time.Sleep(250 * time.Millisecond)
	}
	waitRows(t, a, replica, map[string]int{"t": 101}, 30*time.Second)
	t.Logf("REPORT /healthz: 503 %s after the target blocked the applier (APPLY_STALL_AFTER=10s): %q; 200 again %s after the lock was released",
		unavailable.Round(time.Millisecond), strings.TrimSpace(reason), available.Round(10*time.Microsecond))
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assertContains(t, string(body), "tidemark_apply_last_cut_timestamp_seconds", "tidemark_apply_watermark_lsn")
}
