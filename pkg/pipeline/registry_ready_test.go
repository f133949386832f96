package pipeline

import (
	"context"
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
	ready, reasons, _ := p.Ready()
	if ready || !strings.Contains(strings.Join(reasons, ";"), "the schema registry has not answered") {
		t.Errorf("Ready = %v, %v; want a reason naming the registry", ready, reasons)
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
