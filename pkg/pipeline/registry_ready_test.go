package pipeline

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/tidemark/cdc/pkg/schemareg"
)

// TestReadyNamesUnreachableRegistry: /readyz's reasons say when the schema registry stopped
// answering, and stop saying it once it answers.
func TestReadyNamesUnreachableRegistry(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cl, err := schemareg.New(schemareg.Config{URL: "http://" + addr, RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{Registry: cl})
	if _, reasons, _ := p.Ready(); strings.Contains(strings.Join(reasons, ";"), "schema registry") {
		t.Fatalf("reasons name the registry before any request: %v", reasons)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := cl.Register(ctx, "s-value", sr.TypeAvro, `"string"`); err == nil {
		t.Fatal("Register succeeded with nothing listening")
	}
	// One failed request is within the grace: a probe does not take the service out for it.
	if _, reasons, _ := p.Ready(); strings.Contains(strings.Join(reasons, ";"), "schema registry") {
		t.Errorf("reasons name the registry right after its first failure: %v", reasons)
	}
	st := cl.Status()
	if st.Reachable() || st.Attempts == 0 {
		t.Fatalf("Status after a failed request = %+v, want unreachable", st)
	}
	if why, ok := registryUnready(st, st.Since.Add(registryStall+time.Second)); !ok || !strings.Contains(why, "the schema registry has not answered for 16s") {
		t.Errorf("registryUnready 16s after the first failure = %q, %v; want the registry named", why, ok)
	}

	// The registry is back: the reason goes.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = w.Write([]byte(`{"id":1}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if _, err := cl.Register(t.Context(), "s-value", sr.TypeAvro, `"string"`); err != nil {
		t.Fatalf("Register once the registry is back: %v", err)
	}
	if _, reasons, _ := p.Ready(); strings.Contains(strings.Join(reasons, ";"), "schema registry") {
		t.Errorf("reasons still name the registry once it answered: %v", reasons)
	}
}

// TestRegistryUnready: the registry makes the pipeline not ready after registryStall of
// failures, and at once when it refuses cdc's TLS or credentials (retrying does not mend them).
func TestRegistryUnready(t *testing.T) {
	since := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	down := fmt.Errorf("dial tcp 127.0.0.1:1: connection refused")
	tests := []struct {
		name  string
		st    schemareg.Status
		after time.Duration
		want  string // "" for ready
	}{
		{"answering", schemareg.Status{}, time.Hour, ""},
		{"down within the grace", schemareg.Status{Since: since, Err: down, Attempts: 3}, registryStall, ""},
		{"down past the grace", schemareg.Status{Since: since, Err: down, Attempts: 9}, registryStall + 2*time.Second, "has not answered for 17s (9 attempts"},
		{"wrong CA at once", schemareg.Status{Since: since, Err: fmt.Errorf("%w: x509: certificate signed by unknown authority", schemareg.ErrTLS), Attempts: 1}, 0,
			"refuses cdc's TLS or credentials (1 attempts in 0s; last: TLS with the schema registry failed: x509"},
		{"wrong password at once", schemareg.Status{Since: since, Err: fmt.Errorf("%w (HTTP 401)", schemareg.ErrUnauthorized), Attempts: 1}, time.Second,
			"refuses cdc's TLS or credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			why, ok := registryUnready(tt.st, since.Add(tt.after))
			if ok != (tt.want != "") || !strings.Contains(why, tt.want) {
				t.Errorf("registryUnready = %q, %v; want %q", why, ok, tt.want)
			}
		})
	}
}
