package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// defaultKafkaHeap are the broker's JVM flags for benchmarks: full JIT (no TieredStopAtLevel).
// They are what kafka-server-start.sh uses when KAFKA_HEAP_OPTS is not set: a 1 GiB heap and G1
// with a 20 ms pause target, as users run the broker.
const defaultKafkaHeap = "-Xms1g -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20"

// services are the PostgreSQL server and Kafka cluster the bench uses.
type services struct {
	pgURL   string // URL of a database on the server; scenarios create their own databases
	brokers []string
	source  string
	// broker is the broker's settings, for the report.
	broker string
	// cpu reads the servers' CPU time; nil for services the bench did not start.
	cpu  *serverCPU
	stop func(ctx context.Context) error
}

// acquireServices uses CDC_TEST_PG_URL / CDC_TEST_KAFKA_BROKERS when both are set, or starts
// private servers with scripts/services.sh on free ports in stateDir.
func acquireServices(ctx context.Context, root, stateDir string, o options, getenv func(string) string, logf func(string, ...any)) (*services, error) {
	pg := strings.TrimSpace(getenv("CDC_TEST_PG_URL"))
	brokers := splitList(getenv("CDC_TEST_KAFKA_BROKERS"))
	switch {
	case pg != "" && len(brokers) > 0:
		return &services{pgURL: pg, brokers: brokers, source: "CDC_TEST_PG_URL / CDC_TEST_KAFKA_BROKERS", broker: "external broker (settings unknown)",
			stop: func(context.Context) error { return nil }}, nil
	case pg != "" || len(brokers) > 0:
		return nil, errors.New("set both CDC_TEST_PG_URL and CDC_TEST_KAFKA_BROKERS, or neither")
	}

	heap := o.kafkaHeap
	if heap == "" {
		heap = getenv("TIDEMARK_KAFKA_HEAP")
	}
	if heap == "" {
		heap = defaultKafkaHeap
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("create state folder: %w", err)
	}
	// The postgres user must be able to reach the state folder when we are root.
	if err := os.Chmod(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("chmod state folder: %w", err)
	}
	script := filepath.Join(root, "scripts", "services.sh")
	env := append(os.Environ(),
		"TIDEMARK_STATE="+stateDir,
		"TIDEMARK_PG_PORT="+strconv.Itoa(ports[0]),
		"TIDEMARK_KAFKA_PORT="+strconv.Itoa(ports[1]),
		"TIDEMARK_KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[2]),
		"TIDEMARK_KAFKA_HEAP="+heap,
		// Tear the servers down if the bench dies without cleaning up.
		"TIDEMARK_WATCH_PID="+strconv.Itoa(os.Getpid()),
	)
	runScript := func(ctx context.Context, sub string) (string, error) {
		cmd := exec.CommandContext(ctx, "bash", script, sub)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		return out.String(), err
	}
	logf("starting PostgreSQL and Kafka (scripts/services.sh up, state %s, Kafka JVM %q)", stateDir, heap)
	start := time.Now()
	if out, err := runScript(ctx, "up"); err != nil {
		_, _ = runScript(context.WithoutCancel(ctx), "down")
		return nil, fmt.Errorf("services.sh up: %w\n%s", err, lastLines(out, 40))
	}
	logf("services ready in %s", time.Since(start).Round(100*time.Millisecond))
	sub := "clean"
	if o.keep {
		sub = "down"
	}
	return &services{
		pgURL:   fmt.Sprintf("postgres://postgres@127.0.0.1:%d/tidemark?sslmode=disable", ports[0]),
		brokers: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))},
		source: fmt.Sprintf("scripts/services.sh (PostgreSQL 127.0.0.1:%d, Kafka 127.0.0.1:%d, JVM %q)",
			ports[0], ports[1], heap),
		broker: brokerSettings(stateDir, heap),
		cpu:    &serverCPU{stateDir: stateDir},
		stop: func(ctx context.Context) error {
			if out, err := runScript(ctx, sub); err != nil {
				return fmt.Errorf("services.sh %s: %w\n%s", sub, err, lastLines(out, 20))
			}
			return nil
		},
	}, nil
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// repoRoot walks up from the working folder to the go.mod of github.com/tidemark/cdc.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "module" {
					if strings.Trim(fields[1], `"`) == "github.com/tidemark/cdc" {
						f.Close()
						return dir, nil
					}
					break
				}
			}
			f.Close()
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: run the bench inside the github.com/tidemark/cdc checkout")
		}
		dir = parent
	}
}

// database is a scenario's own database on the shared server.
type database struct {
	name string
	url  string
	base string // the server's original URL, to drop it
}

// newDatabase creates database bench_<tag>_<random>.
func newDatabase(ctx context.Context, base, tag string) (*database, error) {
	name := "bench_" + tag + "_" + randomHex(4)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// url.Error quotes the URL, password included: never wrap it.
		return nil, errors.New("parse PostgreSQL URL: want postgres://user@host:port/db")
	}
	u.Path, u.RawPath = "/"+name, ""
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", redactURL(base), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	return &database{name: name, url: u.String(), base: base}, nil
}

// drop ends the database's replication connections, drops its slots and the database.
func (d *database) drop(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, d.base)
	if err != nil {
		return fmt.Errorf("drop database %s: connect: %w", d.name, err)
	}
	defer conn.Close(context.Background())
	for {
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid)
			FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, d.name); err != nil {
			return fmt.Errorf("drop database %s: terminate slot holders: %w", d.name, err)
		}
		_, _ = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE database = $1 AND NOT active`, d.name)
		var remaining int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`,
			d.name).Scan(&remaining); err != nil {
			return fmt.Errorf("drop database %s: list slots: %w", d.name, err)
		}
		if remaining == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drop database %s: %d slot(s) still in use: %w", d.name, remaining, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.name, err)
	}
	return nil
}

// exec runs statements on the database, each in its own implicit transaction.
func (d *database) exec(ctx context.Context, stmts ...string) error {
	conn, err := pgx.Connect(ctx, d.url)
	if err != nil {
		return fmt.Errorf("connect %s: %w", d.name, err)
	}
	defer conn.Close(context.Background())
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("exec %q: %w", abbreviate(s, 120), err)
		}
	}
	return nil
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func abbreviate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
