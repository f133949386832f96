package replication

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// A registry that refuses the credentials while the stream prepares a table's encoder is a
// prepareError (Run says so instead of "replication connection lost"), not the connection's.
func TestRegistryRefusalIsAPrepareError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	reg, err := schemareg.New(schemareg.Config{URL: srv.URL, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Codec: codec.Config{TopicPrefix: "p", Format: "avro", Registry: reg}, SpillDir: t.TempDir(), HoldMemory: 1 << 20}, fakeHooks{})
	s.Resume(map[change.ExportID]change.LSN{tA: 0})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st := s.state
	st.ctx, st.out = ctx, make(chan *change.Unit, 10)
	err = st.handle(relationMsg(1, "public", "a"))
	if pe, ok := errors.AsType[*prepareError](err); !ok || !errors.Is(err, schemareg.ErrUnauthorized) {
		t.Fatalf("relation of a table under a registry that answers 401: %v (prepare error %v), want a prepareError that is schemareg.ErrUnauthorized", err, pe)
	}
}
