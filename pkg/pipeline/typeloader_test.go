package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tidemark/cdc/pkg/codec"
)

type fakeTypeConn struct {
	open   *atomic.Int32
	busy   atomic.Bool
	fail   bool
	shared *testing.T
}

func (c *fakeTypeConn) types(ctx context.Context, oids []uint32) ([]codec.TypeInfo, error) {
	if !c.busy.CompareAndSwap(false, true) {
		c.shared.Error("two loads on one connection at once")
	}
	defer c.busy.Store(false)
	if c.fail {
		return nil, errors.New("connection lost")
	}
	return []codec.TypeInfo{{OID: oids[0]}}, nil
}

func (c *fakeTypeConn) close() { c.open.Add(-1) }

// TestTypeLoaderConcurrent: loads from many goroutines share one connection, one at a time
// (run with -race: on c9cb695 each load dialed and wrote the plan's connection field at once);
// a failed connection is closed and replaced; close closes the last.
func TestTypeLoaderConcurrent(t *testing.T) {
	var open, dials atomic.Int32
	var fail atomic.Bool
	l := &typeLoader{open: func(context.Context) (typeConn, error) {
		dials.Add(1)
		open.Add(1)
		return &fakeTypeConn{open: &open, fail: fail.Load(), shared: t}, nil
	}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if _, err := l.load(t.Context(), []uint32{uint32(g*100 + i)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if dials.Load() != 1 || open.Load() != 1 {
		t.Fatalf("%d connections dialed, %d open after 400 loads, want 1 and 1", dials.Load(), open.Load())
	}
	// A connection that fails is closed; the next load opens another.
	l.conn.(*fakeTypeConn).fail = true
	if _, err := l.load(t.Context(), []uint32{1}); err == nil {
		t.Fatal("a failing connection's load succeeded")
	}
	if _, err := l.load(t.Context(), []uint32{1}); err != nil || dials.Load() != 2 || open.Load() != 1 {
		t.Fatalf("after a failure: %v, %d dialed, %d open", err, dials.Load(), open.Load())
	}
	l.close()
	if open.Load() != 0 {
		t.Fatalf("%d connections open after close", open.Load())
	}
	if _, err := l.load(t.Context(), []uint32{1}); !errors.Is(err, errLoaderClosed) {
		t.Fatalf("load after close: %v", err)
	}
}
