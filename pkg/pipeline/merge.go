package pipeline

import (
	"context"

	"github.com/tidemark/cdc/pkg/change"
)

// mergeUnits feeds the sink from two channels: stream (the replication stage, reconciles) and
// bulk (snapshot rows). Stream units always go first, so a large copy never queues ahead of the
// changes of tables that are already hydrated: their watermarks keep their pace while a new
// table is copied. Order only matters within an export, and an export's units all travel in one
// of the channels at a time (its snapshot rows and their end marker in bulk; its held changes
// are released into stream only after the copy is durable). out is closed when both inputs are
// closed and drained.
func mergeUnits(ctx context.Context, stream, bulk <-chan *change.Unit, out chan<- *change.Unit) {
	defer close(out)
	for stream != nil || bulk != nil {
		var u *change.Unit
		var ok bool
		// Anything waiting in stream first; then whichever comes (a nil channel never does).
		select {
		case u, ok = <-stream:
			if !ok {
				stream = nil
				continue
			}
		default:
			select {
			case u, ok = <-stream:
				if !ok {
					stream = nil
					continue
				}
			case u, ok = <-bulk:
				if !ok {
					bulk = nil
					continue
				}
			case <-ctx.Done():
				return
			}
		}
		select {
		case out <- u:
			continue
		default:
		}
		select {
		case out <- u:
		case <-ctx.Done():
			return
		}
	}
}
