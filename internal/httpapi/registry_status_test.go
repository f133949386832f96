package httpapi

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/tidemark/cdc/internal/posture"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/schemareg"
	"github.com/tidemark/cdc/pkg/secret"
)

// TestStatusRegistry: without a registry /status has no registry line; with one, the board's
// check says connected, then unreachable once the registry is gone, with the waiting
// registrations' failures beside it.
func TestStatusRegistry(t *testing.T) {
	if r := newTestBoard(fakeService{}).report(time.Now(), "v", false, secret.Token{}, statusQuery{limit: statusDefaultLimit}); r.Registry != nil {
		t.Fatalf("registry line without a registry: %+v", r.Registry)
	}
	reg := srfake.New()
	cl, err := schemareg.New(schemareg.Config{URL: reg.URL(), RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := NewStatusBoard(pipeline.Config{Slot: "tidemark", Registry: cl}, []posture.Posture{}, fakeService{}, slog.New(slog.DiscardHandler))
	if got := b.report(time.Now(), "v", false, secret.Token{}, statusQuery{limit: statusDefaultLimit}).Registry; got == nil || got.State != "unknown" || got.URL != reg.URL() {
		t.Fatalf("before the first check: %+v", got)
	}
	b.sampleRegistry(t.Context())
	if got := b.report(time.Now(), "v", false, secret.Token{}, statusQuery{limit: statusDefaultLimit}).Registry; got.State != "connected" || got.WaitingSince != nil {
		t.Fatalf("registry up: %+v", got)
	}
	reg.Close()
	b.sampleRegistry(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := cl.Register(ctx, "s-value", 0, `"string"`); err == nil {
		t.Fatal("registered with the registry gone")
	}
	got := b.report(time.Now(), "v", false, secret.Token{}, statusQuery{limit: statusDefaultLimit}).Registry
	if got.State != "unreachable" || got.Error == "" || got.WaitingSince == nil || got.FailedAttempts == 0 || !strings.Contains(got.LastError, "s-value") {
		t.Fatalf("registry gone: %+v", got)
	}
}

// TestStatusRegistryFailsBetweenChecks: the board checks the registry every 5 s; when cdc's own
// registrations fail after a check that answered, the registry line says unreachable at once,
// not "connected" with registrations waiting (TestAvroRegistryOutage saw that in CI).
func TestStatusRegistryFailsBetweenChecks(t *testing.T) {
	reg := srfake.New()
	cl, err := schemareg.New(schemareg.Config{URL: reg.URL(), RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := NewStatusBoard(pipeline.Config{Slot: "tidemark", Registry: cl}, []posture.Posture{}, fakeService{}, slog.New(slog.DiscardHandler))
	b.sampleRegistry(t.Context())
	reg.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := cl.Register(ctx, "s-value", 0, `"string"`); err == nil {
		t.Fatal("registered with the registry gone")
	}
	got := b.report(time.Now(), "v", false, secret.Token{}, statusQuery{limit: statusDefaultLimit}).Registry
	if got.State != "unreachable" || got.Error == "" || got.WaitingSince == nil {
		t.Fatalf("registrations failing since the last check: %+v", got)
	}
}
