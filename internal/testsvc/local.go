package testsvc

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Options tunes Start.
type Options struct {
	// State is the servers' state folder, created when missing; the caller owns it, and a failed
	// start leaves its logs there. Empty: a new folder under the system's temporary folder,
	// named after StatePrefix, that a failed start removes.
	State       string
	StatePrefix string // "tidemark-services-" when empty
	// KafkaHeap is the broker's JVM flags (TIDEMARK_KAFKA_HEAP); empty: services.sh's default,
	// or the TIDEMARK_KAFKA_HEAP of the environment.
	KafkaHeap string
	// KafkaAdvertisedPort, when not zero, is the port the broker advertises to clients on
	// 127.0.0.1 instead of its own (a proxy in front of it).
	KafkaAdvertisedPort int
	// PGVersion is the PostgreSQL major version to start (TIDEMARK_PG_VERSION of services.sh):
	// "15", Debian 12's package, or "17", Debian 13's from scripts/postgresql-17.sh. Empty: the
	// TIDEMARK_PG_VERSION of the environment, or 15.
	PGVersion string
}

// Local is a PostgreSQL server and a Kafka broker started from local binaries by
// scripts/services.sh, bound to 127.0.0.1 on ports that were free at start.
type Local struct {
	State          string
	PGPort         int
	KafkaPort      int
	ControllerPort int

	script string
	env    []string
}

// Start starts the servers on three free ports and returns once both are ready. A watchdog of
// services.sh stops them, and removes their state, when this process dies without calling Stop.
func Start(ctx context.Context, opts Options) (*Local, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "scripts", "services.sh")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("find services script: %w", err)
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	state, temporary, err := stateFolder(opts)
	if err != nil {
		return nil, err
	}
	l := &Local{State: state, PGPort: ports[0], KafkaPort: ports[1], ControllerPort: ports[2], script: script}
	l.env = append(os.Environ(),
		"TIDEMARK_STATE="+state,
		"TIDEMARK_PG_PORT="+strconv.Itoa(ports[0]),
		"TIDEMARK_KAFKA_PORT="+strconv.Itoa(ports[1]),
		"TIDEMARK_KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[2]),
		// Tear the servers down if this process dies without cleaning up (go test -timeout
		// panics, SIGKILL).
		"TIDEMARK_WATCH_PID="+strconv.Itoa(os.Getpid()),
	)
	if opts.KafkaHeap != "" {
		l.env = append(l.env, "TIDEMARK_KAFKA_HEAP="+opts.KafkaHeap)
	}
	if opts.PGVersion != "" {
		l.env = append(l.env, "TIDEMARK_PG_VERSION="+opts.PGVersion)
	}
	if opts.KafkaAdvertisedPort != 0 {
		l.env = append(l.env, "TIDEMARK_KAFKA_ADVERTISED_PORT="+strconv.Itoa(opts.KafkaAdvertisedPort))
	}
	if out, err := l.Run(ctx, "up"); err != nil {
		// Leave nothing running; the output (with the server log tails) goes into the error.
		if temporary {
			_, _ = l.Run(context.WithoutCancel(ctx), "clean")
			_ = os.RemoveAll(state)
		} else {
			_, _ = l.Run(context.WithoutCancel(ctx), "down")
		}
		return nil, fmt.Errorf("services.sh up: %w\n%s", err, Tail(out, 60))
	}
	return l, nil
}

// stateFolder creates the state folder, searchable by the postgres user (initdb runs as postgres
// when we are root), and says whether Start made it up.
func stateFolder(opts Options) (dir string, temporary bool, err error) {
	dir = opts.State
	if dir == "" {
		prefix := opts.StatePrefix
		if prefix == "" {
			prefix = "tidemark-services-"
		}
		if dir, err = os.MkdirTemp("", prefix); err != nil {
			return "", false, fmt.Errorf("create state folder: %w", err)
		}
		temporary = true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("create state folder: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("chmod state folder: %w", err)
	}
	return dir, temporary, nil
}

// Run runs `scripts/services.sh sub` (up, down, clean, pg-crash, ...) for these servers and
// returns its combined output.
func (l *Local) Run(ctx context.Context, sub string) (string, error) {
	return runScript(ctx, l.script, l.env, sub)
}

// runScript runs `scripts/services.sh sub` with env and returns its combined output.
func runScript(ctx context.Context, script string, env []string, sub string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", script, sub)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The servers it starts redirect their output; never wait on them for the pipe.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// Stop stops both servers; unless keep, it also removes the state folder.
func (l *Local) Stop(ctx context.Context, keep bool) error {
	sub := "clean"
	if keep {
		sub = "down"
	}
	if out, err := l.Run(ctx, sub); err != nil {
		return fmt.Errorf("services.sh %s (state %s): %w\n%s", sub, l.State, err, Tail(out, 30))
	}
	return nil
}

// PGURL is the URL of the "tidemark" database (user postgres, sslmode=disable).
func (l *Local) PGURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/tidemark?sslmode=disable", l.PGPort)
}

// PGAddr is the PostgreSQL server's host:port.
func (l *Local) PGAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.PGPort)) }

// KafkaAddr is the broker's own listener host:port.
func (l *Local) KafkaAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.KafkaPort)) }

// Brokers is the seed broker list: the broker's own listener.
func (l *Local) Brokers() []string { return []string{l.KafkaAddr()} }

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago.
func FreePorts(n int) ([]int, error) {
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
