package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tidemark/cdc/pkg/pgcat"
)

// receive reads messages from the server and forwards XLogData and keepalives; it answers
// keepalives that request a reply at once, whatever the stream goroutine is doing.
func (s *Stage) receive(ctx context.Context, conn *pgconn.PgConn, msgs chan<- []byte) error {
	defer close(msgs)
	// ReceiveMessage given a cancellable context sets up and tears down a context watcher for
	// every message (a channel, a callback, two selects): 18% of cdc's CPU in a catch-up. The
	// reads take the background context instead, and ctx's end unblocks them once, with a read
	// deadline in the past (the connection is not used again).
	stop := context.AfterFunc(ctx, func() { _ = conn.Conn().SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var copies msgSlab
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
			data := copies.copy(m.Data)
			// A send that does not wait skips the select's locking of two channels (it was
			// a tenth of cdc's CPU in a catch-up, with the stream goroutine's).
			select {
			case msgs <- data:
			default:
				select {
				case msgs <- data:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("replication stream ended by the server")
		}
	}
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
