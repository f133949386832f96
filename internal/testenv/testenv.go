package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
)

// Environment variables read by this package.
const (
	EnvPGURL     = testsvc.EnvPGURL      // PostgreSQL URL of an already running server
	EnvBrokers   = testsvc.EnvBrokers    // comma-separated Kafka seed brokers
	EnvRequire   = "CDC_TEST_REQUIRE"    // "1": fail instead of skip when services are missing
	EnvNoDocker  = "CDC_TEST_NO_DOCKER"  // "1": do not try testcontainers
	EnvKeepState = "CDC_TEST_KEEP_STATE" // "1": keep the local services' state folder
)

// acquireTimeout bounds how long the first test waits for services (a first run downloads the
// Kafka jars from Maven Central).
const acquireTimeout = 5 * time.Minute

// services is one acquired set of servers.
type services struct {
	pgURL   string
	brokers []string
	source  string // human-readable origin, for logs
	pgMajor int    // the PostgreSQL server's major version
	// stop releases the servers; failed says whether the tests failed (keep logs then).
	stop func(ctx context.Context, failed bool) error
}

// harness holds the services of the running test binary. It is the one piece of package state:
// TestMain and the tests share nothing else.
type harness struct {
	mu      sync.Mutex
	inMain  bool
	started bool
	svc     *services
	err     error
	// wrongVersion: the server is not the version EnvPGVersion asks for, which fails every test
	// instead of skipping it.
	wrongVersion bool
	// registry is the shared schema registry, acquired apart from PostgreSQL and Kafka
	// (registry.go).
	registry sharedRegistry
}

var current harness

// Main runs the tests of a package that uses this package and returns the exit code for
// os.Exit. Services are acquired on first use and released after the last test.
func Main(m *testing.M) int {
	current.mu.Lock()
	current.inMain = true
	current.mu.Unlock()

	code := m.Run()

	current.mu.Lock()
	defer current.mu.Unlock()
	current.inMain = false
	if current.svc != nil && current.svc.stop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := current.svc.stop(ctx, code != 0); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop services: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		current.svc = nil
	}
	if err := current.registry.release(code != 0); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop schema registry: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// PGURL returns the URL of the shared PostgreSQL server's "tidemark" database (user postgres,
// sslmode=disable). Prefer NewDB for a database of the test's own.
func PGURL(t testing.TB) string {
	t.Helper()
	return get(t).pgURL
}

// Brokers returns the seed brokers of the shared Kafka cluster.
func Brokers(t testing.TB) []string {
	t.Helper()
	return append([]string(nil), get(t).brokers...)
}

func get(t testing.TB) *services {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: integration test skipped in -short mode")
	}
	current.mu.Lock()
	defer current.mu.Unlock()
	if !current.inMain {
		t.Fatal("testenv: services used outside testenv.Main: add " +
			"`func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }` to the package")
	}
	if !current.started {
		current.started = true
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), acquireTimeout)
		current.svc, current.err = acquire(ctx)
		if current.err == nil {
			current.svc.pgMajor, current.err = checkPGVersion(ctx, current.svc.pgURL)
			current.wrongVersion = current.err != nil
		}
		cancel()
		if current.err == nil {
			fmt.Fprintf(os.Stderr, "testenv: services from %s ready in %s (PostgreSQL %d)\n",
				current.svc.source, time.Since(start).Round(100*time.Millisecond), current.svc.pgMajor)
		}
	}
	if current.wrongVersion {
		t.Fatalf("testenv: %v", current.err)
	}
	if current.err != nil {
		unavailable(t, current.err)
	}
	return current.svc
}

// unavailable skips the test, or fails it when services are required (CI).
func unavailable(t testing.TB, err error) {
	t.Helper()
	if required(os.Getenv) {
		t.Fatalf("testenv: PostgreSQL and Kafka are required (CI=true or %s=1) but not available:\n%v",
			EnvRequire, err)
	}
	t.Skipf("testenv: PostgreSQL and Kafka not available (set CI=true or %s=1 to fail instead):\n%v",
		EnvRequire, err)
}

// required reports whether missing services fail the run instead of skipping tests.
func required(getenv func(string) string) bool {
	if ci, err := strconv.ParseBool(getenv("CI")); err == nil && ci {
		return true
	}
	req, err := strconv.ParseBool(getenv(EnvRequire))
	return err == nil && req
}

func flagSet(getenv func(string) string, name string) bool {
	v, err := strconv.ParseBool(getenv(name))
	return err == nil && v
}

// acquire tries each source in turn and returns the first that works.
func acquire(ctx context.Context) (*services, error) {
	svc, err := fromEnv(os.Getenv)
	if err != nil || svc != nil {
		return svc, err
	}
	var reasons []error
	if flagSet(os.Getenv, EnvNoDocker) {
		reasons = append(reasons, fmt.Errorf("testcontainers: skipped (%s=1)", EnvNoDocker))
	} else {
		svc, err := fromDocker(ctx)
		if err == nil {
			return svc, nil
		}
		reasons = append(reasons, fmt.Errorf("testcontainers: %w", err))
	}
	svc, err = fromLocal(ctx)
	if err == nil {
		return svc, nil
	}
	reasons = append(reasons, fmt.Errorf("local binaries (scripts/services.sh): %w", err))
	return nil, errors.Join(reasons...)
}

// fromEnv returns the services named by the environment, nil when neither variable is set.
func fromEnv(getenv func(string) string) (*services, error) {
	pg, brokers, err := testsvc.FromEnv(getenv)
	if err != nil || pg == "" {
		return nil, err
	}
	return &services{pgURL: pg, brokers: brokers, source: "the environment (" + EnvPGURL + ")"}, nil
}
