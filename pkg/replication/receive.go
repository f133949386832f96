package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tidemark/cdc/pkg/pgcat"
)

// receive reads messages from the server and forwards XLogData and keepalives in batches; it
// answers keepalives that request a reply at once, whatever the stream goroutine is doing.
//
// A batch is handed over as soon as the stream goroutine has taken the one before (it is waiting
// or about to look for more: the same one send per message as a channel of messages), and
// before a read that may wait for the socket (nothing is kept back while the server is quiet).
// While the stream goroutine is busy with a batch the next one grows instead, up to
// batchMessages or batchBytes: one channel send and one receive per batch where a channel of
// messages took one each per message, and no wake-up of this goroutine per message once the
// queue is full.
func (s *Stage) receive(ctx context.Context, conn *pgconn.PgConn, msgs chan<- *msgBatch) error {
	defer close(msgs)
	fe := conn.Frontend()
	// ReceiveMessage given a cancellable context sets up and tears down a context watcher for
	// every message (a channel, a callback, two selects): 18% of cdc's CPU in a catch-up. The
	// reads take the background context instead, and ctx's end unblocks them once, with a read
	// deadline in the past (the connection is not used again).
	stop := context.AfterFunc(ctx, func() { _ = conn.Conn().SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var copies msgSlab
	var cur *msgBatch
	for {
		raw, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, pgcat.ErrSilent) {
				return fmt.Errorf("receive replication message: no change and no keepalive for %s (the receive timeout): %w", s.cfg.Timeouts.Receive, err)
			}
			return fmt.Errorf("receive replication message: %w", err)
		}
		switch m := raw.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			if m.Data[0] == pglogrepl.PrimaryKeepaliveMessageByteID {
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("parse keepalive: %w", err)
				}
				if ka.ReplyRequested {
					if err := s.sendStatus(ctx, false); err != nil {
						return err
					}
				}
			}
			if cur == nil {
				cur = newBatch()
			}
			cur.msgs = append(cur.msgs, copies.copy(m.Data))
			cur.bytes += len(m.Data)
			if len(msgs) > 0 && len(cur.msgs) < batchMessages && cur.bytes < batchBytes && fe.ReadBufferLen() > 0 {
				// The stream goroutine has not taken the last batch yet, and the next message
				// is already read (at least in part): this batch grows.
				continue
			}
			// A send that does not wait skips the select's locking of two channels (it was
			// a tenth of cdc's CPU in a catch-up, with the stream goroutine's).
			select {
			case msgs <- cur:
			default:
				select {
				case msgs <- cur:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			cur = nil
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("replication stream ended by the server")
		}
	}
}

// msgBatch is a run of messages handed from the receive goroutine to the stream goroutine at
// once. The stream goroutine owns it once received, and gives it back with release after
// handling every message in it.
type msgBatch struct {
	msgs  [][]byte
	bytes int
}

const (
	// batchMessages and batchBytes bound a batch; batchQueue batches may wait in the channel
	// (batchQueue × batchMessages is the 4,096 messages the channel of messages held).
	batchMessages = 256
	batchBytes    = 1 << 20
	batchQueue    = 16
)

var batchPool = sync.Pool{New: func() any { return &msgBatch{msgs: make([][]byte, 0, batchMessages)} }}

func newBatch() *msgBatch { return batchPool.Get().(*msgBatch) }

// release gives the batch back for reuse; it keeps no message.
func (b *msgBatch) release() {
	clear(b.msgs)
	b.msgs, b.bytes = b.msgs[:0], 0
	batchPool.Put(b)
}

// msgSlab copies messages into shared chunks: one allocation per msgSlabSize bytes of small
// messages instead of one per message (a catch-up is mostly messages of a few hundred bytes).
// A chunk is freed once the stream goroutine is done with every message in it; it keeps no
// message after handling it (row values are encoded, names copied, before the next message).
type msgSlab struct{ buf []byte }

const (
	msgSlabSize  = 64 << 10
	msgSlabLarge = 4 << 10 // messages larger than this get their own allocation
)

// copy returns a copy of b, capacity-limited so that appending to it cannot reach a neighbour.
func (m *msgSlab) copy(b []byte) []byte {
	if len(b) > msgSlabLarge {
		return append(make([]byte, 0, len(b)), b...)
	}
	if cap(m.buf)-len(m.buf) < len(b) {
		m.buf = make([]byte, 0, msgSlabSize)
	}
	n := len(m.buf)
	m.buf = append(m.buf, b...)
	return m.buf[n:len(m.buf):len(m.buf)]
}
