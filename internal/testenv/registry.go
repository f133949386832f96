package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
)

// EnvRegistryURL names a schema registry that is already running (the base URL of its
// Confluent-compatible API); without it, Registry starts Apicurio Registry from Maven Central.
const EnvRegistryURL = testsvc.EnvRegistryURL

// sharedRegistry is the schema registry of the test binary, started on first use. Its fields are
// guarded by current.mu.
type sharedRegistry struct {
	started bool
	url     string
	reg     *testsvc.Registry // nil when it came from the environment
	err     error
}

// Registry returns the base URL of the shared schema registry's Confluent-compatible API
// (Apicurio Registry's /apis/ccompat/v7): EnvRegistryURL, or an Apicurio Registry that
// `scripts/services.sh registry-up` starts on a free port of 127.0.0.1 for this test binary and
// stops after its last test. It holds its schemas in memory, and the tests of the binary share it:
// isolate with subject names of the test's own (NewTopicPrefix's prefix, for instance).
//
// Like PGURL it skips under -short, and when the registry cannot start (no Java of 21 or later)
// it skips, or fails with CI=true or CDC_TEST_REQUIRE=1.
func Registry(t testing.TB) string {
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
	r := &current.registry
	if !r.started {
		r.started = true
		r.url, r.reg, r.err = acquireRegistry()
	}
	if r.err != nil {
		registryUnavailable(t, r.err)
	}
	return r.url
}

// acquireRegistry takes the registry of the environment, or starts one.
func acquireRegistry() (string, *testsvc.Registry, error) {
	if u := strings.TrimRight(strings.TrimSpace(os.Getenv(EnvRegistryURL)), "/"); u != "" {
		return u, nil, nil
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), acquireTimeout)
	defer cancel()
	reg, err := startRegistry(ctx, testsvc.RegistryOptions{StatePrefix: "tidemark-testenv-registry-"})
	if err != nil {
		return "", nil, err
	}
	fmt.Fprintf(os.Stderr, "testenv: schema registry (Apicurio, %s, state %s) ready in %s\n",
		reg.URL(), reg.State, time.Since(start).Round(100*time.Millisecond))
	return reg.URL(), reg, nil
}

// startRegistry is testsvc.StartRegistry, tried localAttempts times: the port picked as free
// can be taken before the registry binds it.
func startRegistry(ctx context.Context, opts testsvc.RegistryOptions) (*testsvc.Registry, error) {
	var errs []error
	for range localAttempts {
		reg, err := testsvc.StartRegistry(ctx, opts)
		if err == nil {
			return reg, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// release stops a registry that acquireRegistry started; the caller holds current.mu.
func (r *sharedRegistry) release(failed bool) error {
	if r.reg == nil {
		return nil
	}
	keep := failed || flagSet(os.Getenv, EnvKeepState)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := r.reg.Stop(ctx, keep)
	if err == nil && keep {
		fmt.Fprintf(os.Stderr, "testenv: schema registry log kept in %s\n", r.reg.State)
	}
	r.reg = nil
	return err
}

// registryUnavailable skips the test, or fails it when services are required (CI).
func registryUnavailable(t testing.TB, err error) {
	t.Helper()
	if required(os.Getenv) {
		t.Fatalf("testenv: a schema registry is required (CI=true or %s=1) but not available:\n%v",
			EnvRequire, err)
	}
	t.Skipf("testenv: schema registry not available (set CI=true or %s=1 to fail instead):\n%v",
		EnvRequire, err)
}

// RegistryServer is an Apicurio Registry that belongs to one test alone: the test may stop and
// start it. It is removed at the test's cleanup (its log kept when the test failed or
// CDC_TEST_KEEP_STATE=1).
type RegistryServer struct {
	t   testing.TB
	reg *testsvc.Registry
}

// RegistryOptions tunes StartRegistry.
type RegistryOptions struct {
	// TLSCert and TLSKey (PEM files, NewTestCA's Issue makes them), when set, make the registry
	// serve HTTPS only, with this certificate; URL is then https://.
	TLSCert, TLSKey string
	// User and Password, when set, make the registry's API require HTTP basic auth as this user
	// (a Quarkus embedded user: Apicurio needs no OIDC server for it). Apicurio 3.3.3 cannot
	// require client certificates (mutual TLS): its build fixed quarkus.http.ssl.client-auth
	// to NONE, and a run-time value is ignored with a warning.
	User, Password string
	// Persist keeps the registry's schemas across Stop and Start (an H2 file in its state
	// folder), as a production registry keeps its storage; by default Start begins empty.
	Persist bool
}

// StartRegistry starts a private registry for t, skipping or failing as Registry does when it
// cannot.
func StartRegistry(t testing.TB, opts RegistryOptions) *RegistryServer {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: integration test skipped in -short mode")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), acquireTimeout)
	reg, err := startRegistry(ctx, testsvc.RegistryOptions{StatePrefix: "tidemark-private-registry-",
		TLSCert: opts.TLSCert, TLSKey: opts.TLSKey, User: opts.User, Password: opts.Password,
		Persist: opts.Persist})
	cancel()
	if err != nil {
		registryUnavailable(t, err)
	}
	fmt.Fprintf(os.Stderr, "testenv: private schema registry (%s, state %s) ready in %s\n",
		reg.URL(), reg.State, time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() {
		keep := t.Failed() || flagSet(os.Getenv, EnvKeepState)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := reg.Stop(ctx, keep); err != nil {
			t.Errorf("testenv: %v", err)
		}
		if keep {
			fmt.Fprintf(os.Stderr, "testenv: private schema registry log kept in %s\n", reg.State)
		}
	})
	return &RegistryServer{t: t, reg: reg}
}

// URL is the base URL of the registry's Confluent-compatible API; it stays the same across
// Stop and Start.
func (s *RegistryServer) URL() string { return s.reg.URL() }

// State is the registry's state folder (its log is registry/registry.log).
func (s *RegistryServer) State() string { return s.reg.State }

// PID is the registry JVM's process id.
func (s *RegistryServer) PID() int {
	s.t.Helper()
	pid, err := s.reg.PID()
	if err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
	return pid
}

// Stop stops the registry (SIGTERM, then SIGKILL after 30 s) and returns once it is gone.
func (s *RegistryServer) Stop() {
	s.t.Helper()
	s.run(time.Minute, "registry-down")
}

// Start starts the registry again on the same port and returns once it listens. Its storage is
// in memory, so it starts empty, unless RegistryOptions.Persist kept it.
func (s *RegistryServer) Start() {
	s.t.Helper()
	s.run(3*time.Minute, "registry-up")
}

func (s *RegistryServer) run(timeout time.Duration, sub string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if out, err := s.reg.Run(ctx, sub); err != nil {
		s.t.Fatalf("testenv: services.sh %s: %v\n%s", sub, err, testsvc.Tail(out, 60))
	}
}
