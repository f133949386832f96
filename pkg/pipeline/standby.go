package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// holder describes the process that streams from a replication slot.
type holder struct {
	pid         int32
	application string
	client      string
	since       time.Time
}

func (h holder) String() string {
	s := fmt.Sprintf("PostgreSQL backend pid %d", h.pid)
	if h.application != "" {
		s += fmt.Sprintf(" (application %q", h.application)
		if h.client != "" {
			s += " from " + h.client
		}
		s += ")"
	} else if h.client != "" {
		s += " from " + h.client
	}
	if !h.since.IsZero() {
		s += " since " + h.since.UTC().Format(time.RFC3339)
	}
	return s
}

// slotHolder returns the process streaming from slot, if any.
func slotHolder(ctx context.Context, conn *pgx.Conn, slot string) (holder, bool, error) {
	var h holder
	var app, client *string
	var since *time.Time
	err := conn.QueryRow(ctx, `
		SELECT s.active_pid, a.application_name, host(a.client_addr) || ':' || a.client_port, a.backend_start
		FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
		WHERE s.slot_name = $1 AND s.active`, slot).Scan(&h.pid, &app, &client, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return holder{}, false, nil
	}
	if err != nil {
		return holder{}, false, fmt.Errorf("read the holder of slot %s: %w", slot, err)
	}
	if app != nil {
		h.application = *app
	}
	if client != nil {
		h.client = *client
	}
	if since != nil {
		h.since = *since
	}
	return h, true, nil
}

// waitAsStandby returns once no process streams from the slot: while another instance holds
// it, this one is a standby that takes over when the holder goes away. It logs who holds the
// slot when it starts waiting and then every standbyLogEvery. Nothing is written to Kafka or
// PostgreSQL while waiting (the transactional producer is initialised only afterwards, so a
// standby never fences the running instance).
func waitAsStandby(ctx context.Context, conn *pgx.Conn, slot string, poll time.Duration, log *slog.Logger) error {
	var lastLog time.Time
	waited := false
	for {
		h, held, err := slotHolder(ctx, conn, slot)
		if err != nil {
			return err
		}
		if !held {
			if waited {
				log.Info("replication slot is free; taking over", "slot", slot)
			}
			return nil
		}
		if time.Since(lastLog) >= standbyLogEvery {
			log.Warn("replication slot is held by another process; waiting as a standby", "slot", slot, "holder", h.String())
			lastLog = time.Now()
		}
		waited = true
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// standbyLogEvery is how often a waiting standby repeats who holds the slot.
const standbyLogEvery = 30 * time.Second

// otherHolder reports whether another process streams from the slot in the seconds after this
// instance let go of it: any holder but own, the backend of this instance's last replication
// connection (it ends as soon as it notices its connection closed).
func otherHolder(ctx context.Context, cfg Config, own uint32) (holder, bool) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := connect(ctx, cfg.PGURL)
	if err != nil {
		return holder{}, false
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(otherHolderWindow)
	for time.Now().Before(deadline) {
		h, held, err := slotHolder(ctx, conn, cfg.Slot)
		if err != nil {
			return holder{}, false
		}
		if held && uint32(h.pid) != own {
			return h, true
		}
		select {
		case <-ctx.Done():
			return holder{}, false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return holder{}, false
}

// otherHolderWindow is how long a fenced instance watches the slot for the instance that fenced
// it; that one takes the slot as soon as it is free (its standby poll, then its start-up).
const otherHolderWindow = 5 * time.Second
