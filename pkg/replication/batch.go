package replication

import (
	"io"

	"github.com/jackc/pgx/v5/pgproto3"
)

// The receive goroutine hands the stream goroutine batches of messages, not one message at a
// time: a channel send per WAL message woke the stream goroutine for every message of a
// catch-up, and the copy of each message was an allocation. A batch holds the messages that
// pgconn parsed out of one read from the socket: the receive goroutine sends it just before
// pgconn reads the socket again (flushReader), so no message waits for more data to arrive,
// and a catch-up hands over one batch per read (about 8 KiB of messages) instead of one
// message. Batches are recycled through a free list, so the steady state allocates nothing.

// msgBatch is a run of replication messages (CopyData payloads) back to back.
type msgBatch struct {
	buf  []byte
	ends []int // end offset in buf of each message
}

// Bounds of one batch: the receive goroutine sends a batch that reaches either at once. A
// batch whose buffer grew past maxPooledBatch (a large row) is not recycled.
const (
	maxBatchMessages = 1024
	maxBatchBytes    = 256 << 10
	maxPooledBatch   = 1 << 20
	// batchesInFlight bounds the batches between the two goroutines (the channel's capacity).
	batchesInFlight = 64
)

// add appends one message.
func (b *msgBatch) add(data []byte) {
	b.buf = append(b.buf, data...)
	b.ends = append(b.ends, len(b.buf))
}

func (b *msgBatch) full() bool { return len(b.ends) >= maxBatchMessages || len(b.buf) >= maxBatchBytes }

// each calls fn with every message in order; the slice is valid only during the call.
func (b *msgBatch) each(fn func([]byte) error) error {
	start := 0
	for _, end := range b.ends {
		if err := fn(b.buf[start:end:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// batchPool recycles batches between the two goroutines.
type batchPool chan *msgBatch

func newBatchPool() batchPool { return make(batchPool, batchesInFlight+2) }

// get returns an empty batch, recycled when one is free.
func (p batchPool) get() *msgBatch {
	select {
	case b := <-p:
		return b
	default:
		return &msgBatch{buf: make([]byte, 0, 16<<10), ends: make([]int, 0, 128)}
	}
}

// put recycles b once its messages are handled (nothing refers to them any more).
func (p batchPool) put(b *msgBatch) {
	if cap(b.buf) > maxPooledBatch {
		return
	}
	b.buf, b.ends = b.buf[:0], b.ends[:0]
	select {
	case p <- b:
	default:
	}
}

// flushReader is the reader under pgconn's message parser (pgconn.Config.BuildFrontend): it
// calls before, when set, each time the parser needs more bytes from the socket, that is, once
// every message already read is parsed. An error from before fails the read.
type flushReader struct {
	r      io.Reader
	before func() error
}

func (f *flushReader) Read(p []byte) (int, error) {
	if f.before != nil {
		if err := f.before(); err != nil {
			return 0, err
		}
	}
	return f.r.Read(p)
}

// frontend returns a pgconn.Config.BuildFrontend that reads through f.
func (f *flushReader) frontend() func(r io.Reader, w io.Writer) *pgproto3.Frontend {
	return func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		f.r = r
		return pgproto3.NewFrontend(f, w)
	}
}
