package testsvc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// EnvRegistryURL names a schema registry that is already running: the base URL of its
// Confluent-compatible API (for Apicurio Registry, http://host:port/apis/ccompat/v7).
const EnvRegistryURL = "CDC_TEST_SCHEMA_REGISTRY_URL"

// RegistryAPI is the path of Apicurio Registry's Confluent-compatible API.
const RegistryAPI = "/apis/ccompat/v7"

// Registry is an Apicurio Registry started by `scripts/services.sh registry-up` on a free port of
// 127.0.0.1, with in-memory storage: a restarted registry starts empty. services.sh runs it on a
// Java of 21 or later that it finds on the machine (or TIDEMARK_JAVA21_HOME), and fails, saying
// what to install, when there is none.
type Registry struct {
	State string
	Port  int
	TLS   bool // HTTPS (RegistryOptions.TLSCert)

	script string
	env    []string
}

// RegistryOptions tunes StartRegistry.
type RegistryOptions struct {
	// State and StatePrefix are Options'.
	State, StatePrefix string
	// TLSCert and TLSKey (PEM files), when set, make the registry serve HTTPS only, with this
	// certificate. (Apicurio 3.3.3 cannot require client certificates: its build fixed
	// quarkus.http.ssl.client-auth to NONE.)
	TLSCert, TLSKey string
	// User and Password, when set, make the registry's API (/apis/*) require HTTP basic auth as
	// this user (services.sh's TIDEMARK_REGISTRY_USER and TIDEMARK_REGISTRY_PASSWORD: a Quarkus
	// embedded user, no OIDC server).
	User, Password string
	// Persist keeps the schemas in an H2 file of the state folder across a stop and a start
	// (services.sh's TIDEMARK_REGISTRY_PERSIST); by default they are in memory.
	Persist bool
}

// StartRegistry starts a registry and returns once it listens. A watchdog of services.sh stops
// it, and removes its state, when this process dies without calling Stop.
func StartRegistry(ctx context.Context, opts RegistryOptions) (*Registry, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "scripts", "services.sh")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("find services script: %w", err)
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	if opts.StatePrefix == "" {
		opts.StatePrefix = "tidemark-registry-"
	}
	state, temporary, err := stateFolder(Options{State: opts.State, StatePrefix: opts.StatePrefix})
	if err != nil {
		return nil, err
	}
	r := &Registry{State: state, Port: ports[0], TLS: opts.TLSCert != "", script: script}
	r.env = append(os.Environ(),
		"TIDEMARK_STATE="+state,
		"TIDEMARK_REGISTRY_PORT="+strconv.Itoa(ports[0]),
		"TIDEMARK_WATCH_PID="+strconv.Itoa(os.Getpid()),
		"TIDEMARK_REGISTRY_TLS_CERT="+opts.TLSCert,
		"TIDEMARK_REGISTRY_TLS_KEY="+opts.TLSKey,
	)
	if opts.Persist {
		r.env = append(r.env, "TIDEMARK_REGISTRY_PERSIST=1")
	}
	if opts.User != "" || opts.Password != "" {
		r.env = append(r.env, "TIDEMARK_REGISTRY_USER="+opts.User, "TIDEMARK_REGISTRY_PASSWORD="+opts.Password)
	}
	if out, err := r.Run(ctx, "registry-up"); err != nil {
		if temporary {
			_, _ = r.Run(context.WithoutCancel(ctx), "clean")
			_ = os.RemoveAll(state)
		} else {
			_, _ = r.Run(context.WithoutCancel(ctx), "registry-down")
		}
		return nil, fmt.Errorf("services.sh registry-up: %w\n%s", err, Tail(out, 60))
	}
	return r, nil
}

// URL is the base URL of the registry's Confluent-compatible API.
func (r *Registry) URL() string {
	scheme := "http"
	if r.TLS {
		scheme = "https"
	}
	return scheme + "://127.0.0.1:" + strconv.Itoa(r.Port) + RegistryAPI
}

// Run runs `scripts/services.sh sub` (registry-up, registry-down, clean) for this registry and
// returns its combined output.
func (r *Registry) Run(ctx context.Context, sub string) (string, error) {
	return runScript(ctx, r.script, r.env, sub)
}

// PID is the registry JVM's process id, from its pid file.
func (r *Registry) PID() (int, error) {
	path := filepath.Join(r.State, "registry", "registry.pid")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("registry pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("registry pid file %s: %w", path, err)
	}
	return pid, nil
}

// Stop stops the registry; unless keep, it also removes the state folder (its log).
func (r *Registry) Stop(ctx context.Context, keep bool) error {
	sub := "clean"
	if keep {
		sub = "registry-down"
	}
	if out, err := r.Run(ctx, sub); err != nil {
		return fmt.Errorf("services.sh %s (state %s): %w\n%s", sub, r.State, err, Tail(out, 30))
	}
	return nil
}
