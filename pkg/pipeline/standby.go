package pipeline

import (
	"context"
	"time"

	"github.com/tidemark/cdc/pkg/replication"
)

// otherHolder reports whether another process streams from the slot in the seconds after this
// instance let go of it: any Holder but own, the backend of this instance's last replication
// connection (it ends as soon as it notices its connection closed).
func otherHolder(ctx context.Context, cfg Config, own uint32) (replication.Holder, bool) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := connect(ctx, cfg.PGURL, cfg.timeouts())
	if err != nil {
		return replication.Holder{}, false
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(otherHolderWindow)
	for time.Now().Before(deadline) {
		h, held, err := replication.SlotHolder(ctx, conn, cfg.Slot)
		if err != nil {
			return replication.Holder{}, false
		}
		if held && uint32(h.PID) != own {
			return h, true
		}
		select {
		case <-ctx.Done():
			return replication.Holder{}, false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return replication.Holder{}, false
}

// otherHolderWindow is how long a fenced instance watches the slot for the instance that fenced
// it; that one takes the slot as soon as it is free (its standby poll, then its start-up).
const otherHolderWindow = 5 * time.Second
