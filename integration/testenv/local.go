package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// localAttempts is how often fromLocal retries with new ports: a port picked as free can be
// taken by someone else before the server binds it.
const localAttempts = 2

// fromLocal starts PostgreSQL and Kafka from local binaries with scripts/services.sh, in a
// private state folder, on free ports.
func fromLocal(ctx context.Context) (*services, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "scripts", "services.sh")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("find services script: %w", err)
	}
	var errs []error
	for range localAttempts {
		svc, err := startLocal(ctx, script)
		if err == nil {
			return svc, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func startLocal(ctx context.Context, script string) (*services, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: the folder must be searchable by the postgres user when we are root.
	state, err := os.MkdirTemp("", "tidemark-testenv-")
	if err != nil {
		return nil, fmt.Errorf("create state folder: %w", err)
	}
	if err := os.Chmod(state, 0o755); err != nil {
		return nil, fmt.Errorf("chmod state folder: %w", err)
	}
	env := append(os.Environ(),
		"TIDEMARK_STATE="+state,
		"TIDEMARK_PG_PORT="+strconv.Itoa(ports[0]),
		"TIDEMARK_KAFKA_PORT="+strconv.Itoa(ports[1]),
		"TIDEMARK_KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[2]),
		// Tear the servers down if this test binary dies without running Main's cleanup
		// (go test -timeout panics, SIGKILL).
		"TIDEMARK_WATCH_PID="+strconv.Itoa(os.Getpid()),
	)
	run := func(ctx context.Context, sub string) (string, error) {
		cmd := exec.CommandContext(ctx, "bash", script, sub)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = &out
		// The servers it starts redirect their output; never wait on them for the pipe.
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		return out.String(), err
	}

	if out, err := run(ctx, "up"); err != nil {
		// Leave nothing behind; the output (with the server log tails) goes into the error.
		_, _ = run(context.WithoutCancel(ctx), "clean")
		_ = os.RemoveAll(state)
		return nil, fmt.Errorf("services.sh up: %w\n%s", err, tail(out, 60))
	}
	stop := func(ctx context.Context, failed bool) error {
		keep := failed || flagSet(os.Getenv, EnvKeepState)
		sub := "clean"
		if keep {
			sub = "down"
		}
		out, err := run(ctx, sub)
		if err != nil {
			return fmt.Errorf("services.sh %s (state %s): %w\n%s", sub, state, err, tail(out, 30))
		}
		if keep {
			fmt.Fprintf(os.Stderr, "testenv: server logs kept in %s\n", state)
		}
		return nil
	}
	return &services{
		pgURL:   fmt.Sprintf("postgres://postgres@127.0.0.1:%d/tidemark?sslmode=disable", ports[0]),
		brokers: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))},
		source: fmt.Sprintf("local binaries (PostgreSQL 127.0.0.1:%d, Kafka 127.0.0.1:%d, state %s)",
			ports[0], ports[1], state),
		stop: stop,
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
		// Held open until all are picked, so the kernel hands out distinct ports.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
