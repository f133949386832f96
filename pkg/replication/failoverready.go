package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// StandbySlot is a standby's copy of a failover slot, as its pg_replication_slots shows it
// (PostgreSQL 17+).
type StandbySlot struct {
	Exists bool
	// Synced: the slot sync worker (or pg_sync_replication_slots) made it from the primary's;
	// a slot the standby made itself is not, and a promotion does not carry it on.
	Synced bool
	// Temporary: synchronisation is held back. The sync makes a new copy temporary and
	// persists it only once the primary's slot no longer needs WAL or catalog rows older than
	// the standby keeps; a promotion drops a temporary slot.
	Temporary bool
	// Invalidation is invalidation_reason ("" when the slot is valid).
	Invalidation string
	// Confirmed is confirmed_flush_lsn (0 when unknown: a temporary copy has none yet).
	Confirmed change.LSN
	// LastSync is inactive_since, which for a synchronised slot is the time of its last
	// synchronisation (of a temporary copy: the last attempt; zero when unknown).
	LastSync time.Time
}

// FailoverReady is PostgreSQL's own definition of a slot ready for failover on the standby
// (Logical Replication Failover): synced AND NOT temporary AND invalidation_reason IS NULL. A
// promotion now keeps the slot and cdc goes on from it.
func (s StandbySlot) FailoverReady() bool {
	return s.Exists && s.Synced && !s.Temporary && s.Invalidation == ""
}

// NotReady names the first condition of FailoverReady that fails, as a short phrase ("" when
// the slot is ready): the same words in cdc check, the status page, /readyz and the log.
func (s StandbySlot) NotReady() string {
	switch {
	case !s.Exists:
		return "missing (not synchronised yet)"
	case s.Invalidation != "":
		return fmt.Sprintf("invalidated (invalidation_reason = %s)", s.Invalidation)
	case !s.Synced:
		return "not synced (synced = false: the standby's own slot, not the primary's copy)"
	case s.Temporary:
		return "temporary (synchronisation held back: the primary's slot needs WAL or catalog rows older than the standby keeps)"
	}
	return ""
}

// HeldBack reports whether the standby holds the slot's synchronisation back: a copy exists
// but stays temporary until the primary's slot moves past what the standby keeps. PostgreSQL
// logs why ("could not synchronize replication slot"); the log is not readable over SQL.
func (s StandbySlot) HeldBack() bool {
	return s.Exists && s.Synced && s.Temporary && s.Invalidation == ""
}

// ReadStandbySlot reads slot on a standby (17+).
func ReadStandbySlot(ctx context.Context, conn pgcat.Querier, slot string) (StandbySlot, error) {
	var s StandbySlot
	var invalidation, confirmed *string
	var since *time.Time
	err := conn.QueryRow(ctx, `SELECT synced, temporary, invalidation_reason, confirmed_flush_lsn::text, inactive_since
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&s.Synced, &s.Temporary, &invalidation, &confirmed, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read the standby's copy of slot %s: %w", slot, err)
	}
	s.Exists = true
	if invalidation != nil {
		s.Invalidation = *invalidation
	}
	if confirmed != nil {
		if s.Confirmed, err = change.ParseLSN(*confirmed); err != nil {
			return s, fmt.Errorf("read the standby's copy of slot %s: %w", slot, err)
		}
	}
	if since != nil {
		s.LastSync = *since
	}
	return s, nil
}
