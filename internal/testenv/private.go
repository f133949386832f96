package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
)

// PrivateOptions tunes StartPrivate.
type PrivateOptions struct {
	// KafkaAdvertisedPort, when not zero, is the port the broker advertises to clients on
	// 127.0.0.1 instead of its own: a test puts a proxy there so that every client connection,
	// not only the bootstrap one, goes through it. The proxy must forward to Servers.KafkaAddr.
	KafkaAdvertisedPort int
}

// Servers are a PostgreSQL server and a Kafka broker that belong to one test alone, started from
// local binaries with scripts/services.sh. Unlike the shared services, the test may crash and
// restart them. They are removed at the test's cleanup (their state folder is kept when the test
// failed or CDC_TEST_KEEP_STATE=1).
type Servers struct {
	t testing.TB
	l *testsvc.Local
}

// StartPrivate starts private servers for t. It skips under -short; when the servers cannot start
// it skips, or fails with CI=true or CDC_TEST_REQUIRE=1. Environment-provided and Docker services
// are not used: the test needs to kill these.
func StartPrivate(t testing.TB, opts PrivateOptions) *Servers {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: integration test skipped in -short mode")
	}
	version, err := wantPGVersion(os.Getenv)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), acquireTimeout)
	l, err := testsvc.Start(ctx, testsvc.Options{StatePrefix: "tidemark-private-",
		KafkaAdvertisedPort: opts.KafkaAdvertisedPort, PGVersion: pgVersionOption(version)})
	cancel()
	if err != nil {
		unavailable(t, err)
	}
	fmt.Fprintf(os.Stderr, "testenv: private servers (PostgreSQL %s, Kafka %s, state %s) ready in %s\n",
		l.PGAddr(), l.KafkaAddr(), l.State, time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() {
		keep := t.Failed() || flagSet(os.Getenv, EnvKeepState)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := l.Stop(ctx, keep); err != nil {
			t.Errorf("testenv: %v", err)
		}
		if keep {
			fmt.Fprintf(os.Stderr, "testenv: private server logs kept in %s\n", l.State)
		}
	})
	return &Servers{t: t, l: l}
}

// run runs `services.sh sub` on the servers within timeout.
func (s *Servers) run(timeout time.Duration, sub string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.l.Run(ctx, sub)
}

// PGURL returns the URL of the "tidemark" database (user postgres, sslmode=disable).
func (s *Servers) PGURL() string { return s.l.PGURL() }

// PGAddr is the PostgreSQL server's host:port.
func (s *Servers) PGAddr() string { return s.l.PGAddr() }

// KafkaAddr is the broker's own listener host:port (what a proxy forwards to). With
// KafkaAdvertisedPort set, clients that bootstrap here are sent to the advertised port.
func (s *Servers) KafkaAddr() string { return s.l.KafkaAddr() }

// State is the servers' state folder (logs under postgres/ and kafka/).
func (s *Servers) State() string { return s.l.State }

// NewDB creates a fresh database on the private server and returns its URL; it is dropped, with
// its replication slots, at cleanup.
func (s *Servers) NewDB(t testing.TB) string {
	t.Helper()
	return newDB(t, s.PGURL())
}

// kafkaPID is the broker JVM's process id, from its pid file.
func (s *Servers) kafkaPID() (int, string) {
	s.t.Helper()
	pidFile := filepath.Join(s.l.State, "kafka", "kafka.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		s.t.Fatalf("testenv: kafka pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		s.t.Fatalf("testenv: kafka pid file %s: %v", pidFile, err)
	}
	return pid, pidFile
}

// PauseKafka stops the broker's JVM with SIGSTOP: a broker that hangs. Its connections stay
// open and new ones are accepted by the kernel, but nothing is answered until ResumeKafka. The
// JVM is resumed at cleanup if the test did not.
func (s *Servers) PauseKafka() {
	s.t.Helper()
	pid, _ := s.kafkaPID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		s.t.Fatalf("testenv: pause kafka (pid %d): %v", pid, err)
	}
	s.t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
}

// ResumeKafka resumes a broker paused by PauseKafka.
func (s *Servers) ResumeKafka() {
	s.t.Helper()
	pid, _ := s.kafkaPID()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		s.t.Fatalf("testenv: resume kafka (pid %d): %v", pid, err)
	}
}

// KillKafka kills the broker's JVM with SIGKILL and waits until it is gone: an honest crash.
func (s *Servers) KillKafka() {
	s.t.Helper()
	pid, pidFile := s.kafkaPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		s.t.Fatalf("testenv: kill kafka (pid %d): %v", pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			s.t.Fatalf("testenv: kafka (pid %d) still alive 30s after SIGKILL", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The JVM is not our child: if nobody reaps it, `kill -0` in services.sh would still see a
	// zombie as running. Without the pid file, `up` starts a new broker.
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.t.Fatalf("testenv: kill kafka: %v", err)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Format: pid (comm) state ...; comm may contain spaces or parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st != 'Z' && st != 'X'
}

// StartKafka starts the broker again on the same data folder and ports (it keeps its topics,
// offsets and transaction state) and returns once it is ready.
func (s *Servers) StartKafka() {
	s.t.Helper()
	if out, err := s.run(3*time.Minute, "up"); err != nil {
		s.t.Fatalf("testenv: restart kafka: %v\n%s", err, testsvc.Tail(out, 60))
	}
}

// RestartPostgres restarts PostgreSQL with `pg_ctl restart -m immediate` (no shutdown
// checkpoint: crash recovery on start) and returns once it accepts connections again.
func (s *Servers) RestartPostgres() {
	s.t.Helper()
	if out, err := s.run(2*time.Minute, "pg-crash"); err != nil {
		s.t.Fatalf("testenv: restart postgres: %v\n%s", err, testsvc.Tail(out, 40))
	}
}
