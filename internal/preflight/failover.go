package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
)

// failoverDoc is where the set-up of both servers is described.
const failoverDoc = "docs/production.md, Failover"

// failover reports what a failover to a standby needs (PostgreSQL 17+): the slot is a failover
// slot, synchronized_standby_slots names the standby's physical slot, that slot is streaming,
// and on the standby (when CDC_PG_URL names it as another host) the slot's copy is failover-ready and
// sync_replication_slots and hot_standby_feedback are on. Without CDC_SLOT_FAILOVER and without
// a failover slot it says nothing, unless the server has streaming standbys.
func (p *checker) failover(ctx context.Context, conn *pgcat.Conn) {
	version := conn.PgConn().ParameterStatus("server_version")
	if pgcat.ServerMajor(version) < replication.FailoverMajor {
		if p.cfg.SlotFailover {
			p.fail("upgrade to PostgreSQL 17 or later, or set CDC_SLOT_FAILOVER=false",
				"CDC_SLOT_FAILOVER=true but PostgreSQL %s has no failover slots (17+)", version)
		}
		return
	}
	slot := p.cfg.Slot
	var exists, failover, inRecovery bool
	var standbySlots string
	var standbys int
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
			coalesce((SELECT failover FROM pg_replication_slots WHERE slot_name = $1), false),
			pg_is_in_recovery(), current_setting('synchronized_standby_slots'),
			(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical' AND active)::int`, slot).
		Scan(&exists, &failover, &inRecovery, &standbySlots, &standbys)
	if err != nil {
		p.fail("", "cannot read the failover set-up: %v", err)
		return
	}
	if inRecovery {
		// Capture from the standby: its own lines (standby.go) say what it needs.
		return
	}
	wanted := p.cfg.SlotFailover || failover
	switch {
	case failover:
		p.pass("replication slot %s is a failover slot: a standby set up for it keeps a synchronised copy", slot)
	case p.cfg.SlotFailover && exists:
		p.pass("replication slot %s is not a failover slot yet; cdc makes it one at start (CDC_SLOT_FAILOVER=true)", slot)
	case p.cfg.SlotFailover:
		p.pass("replication slot %s will be created as a failover slot (CDC_SLOT_FAILOVER=true)", slot)
	case standbys > 0:
		p.warn("set CDC_SLOT_FAILOVER=true ("+failoverDoc+")",
			"%d physical standby(s) stream from this server, but the replication slot is not a failover slot: after a promotion the new primary has no slot: cdc stops, and every table must be copied again", standbys)
		return
	default:
		return
	}
	if !wanted {
		return
	}
	names := splitList(standbySlots)
	if len(names) == 0 {
		p.fail("ALTER SYSTEM SET synchronized_standby_slots = '<the standby's physical slot>'; SELECT pg_reload_conf(); ("+failoverDoc+")",
			"synchronized_standby_slots is empty: cdc may publish changes the standby has not received, and after a promotion they would be in Kafka but not in the new primary")
	}
	for _, name := range names {
		p.standbySlot(ctx, conn, name)
	}
	p.standby(ctx, exists)
}

// standbySlot reports the physical slot name of synchronized_standby_slots on the primary.
func (p *checker) standbySlot(ctx context.Context, conn *pgcat.Conn, name string) {
	var kind string
	var active bool
	var state, app *string
	err := conn.QueryRow(ctx, `SELECT s.slot_type, s.active, r.state, r.application_name
		FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
		WHERE s.slot_name = $1`, name).Scan(&kind, &active, &state, &app)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		p.fail(fmt.Sprintf("SELECT pg_create_physical_replication_slot('%s'); and set primary_slot_name = '%s' on the standby", name, name),
			"synchronized_standby_slots names %s, but there is no such slot: cdc's stream waits for it", name)
	case err != nil:
		p.fail("", "cannot read physical slot %s: %v", name, err)
	case kind != "physical":
		p.fail("name the standby's physical slot in synchronized_standby_slots",
			"synchronized_standby_slots names %s, a %s slot", name, kind)
	case !active:
		p.fail("start the standby (primary_slot_name = '"+name+"'), or take the slot out of synchronized_standby_slots: cdc's stream waits for it",
			"synchronized_standby_slots names %s, but no standby streams from it", name)
	default:
		who := ""
		if app != nil && *app != "" {
			who = " (" + *app + ")"
		}
		s := "streaming"
		if state != nil {
			s = *state
		}
		p.pass("synchronized_standby_slots names %s: a standby%s streams from it (%s)", name, who, s)
	}
}

// standby connects to a standby among CDC_PG_URL's hosts and reports whether the slot's copy
// there is failover-ready, in PostgreSQL's own terms (synced, not temporary, not invalidated);
// without one it says what to verify on the standby. exists says whether the slot exists on
// the primary: before cdc's first start it does not, and the standby cannot have a copy yet.
func (p *checker) standby(ctx context.Context, exists bool) {
	slot := p.cfg.Slot
	verify := fmt.Sprintf("on the standby: sync_replication_slots = on, hot_standby_feedback = on, primary_slot_name set, primary_conninfo with dbname, and SELECT synced AND NOT temporary AND invalidation_reason IS NULL FROM pg_replication_slots WHERE slot_name = '%s' is true before a promotion", slot)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgcat.ConnectStandby(cctx, p.cfg.PGURL, pgcat.Timeouts{Connect: p.cfg.ConnectTimeout})
	switch {
	case errors.Is(err, pgcat.ErrOneHost):
		p.pass("standby: CDC_PG_URL names one host, so cdc check cannot see it; verify %s", verify)
		return
	case err != nil:
		p.warn(verify, "standby: none of CDC_PG_URL's other hosts is a reachable standby (%v)", err)
		return
	}
	defer conn.Close(context.Background())
	host := conn.PgConn().Conn().RemoteAddr().String()
	var syncSlots, feedback string
	err = conn.QueryRow(ctx, `SELECT current_setting('sync_replication_slots'), current_setting('hot_standby_feedback')`).
		Scan(&syncSlots, &feedback)
	if err != nil {
		p.fail("", "standby %s: cannot read its settings: %v", host, err)
		return
	}
	if syncSlots == "on" {
		p.pass("standby %s: sync_replication_slots = on", host)
	} else {
		p.fail("on the standby: ALTER SYSTEM SET sync_replication_slots = on; SELECT pg_reload_conf();",
			"standby %s: sync_replication_slots = %s: the slot is not synchronised to it", host, syncSlots)
	}
	if feedback == "on" {
		p.pass("standby %s: hot_standby_feedback = on", host)
	} else {
		p.fail("on the standby: ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf();",
			"standby %s: hot_standby_feedback = %s: the synchronised slot cannot hold back the catalog rows it needs", host, feedback)
	}
	s, err := replication.ReadStandbySlot(ctx, conn, slot)
	if err != nil {
		p.fail("", "standby %s: %v", host, err)
		return
	}
	p.standbyCopy(host, exists, s)
}

// waitFailoverReadyFix is what to do while the standby's copy is not failover-ready.
const waitFailoverReadyFix = "promote only once it is: cdc check --wait-failover-ready waits for it (" + failoverDoc + ")"

// standbyCopy reports the standby's copy s of the slot, which exists on the primary or not.
func (p *checker) standbyCopy(host string, exists bool, s replication.StandbySlot) {
	slot := p.cfg.Slot
	// inactive_since is the last synchronisation of a synced copy; of a temporary one, only the
	// last attempt.
	synced := ""
	if !s.LastSync.IsZero() && s.FailoverReady() {
		synced = fmt.Sprintf(", last synchronised %s ago", time.Since(s.LastSync).Round(time.Second))
	}
	switch {
	case s.FailoverReady():
		p.pass("standby %s: replication slot %s is failover-ready (synced, not temporary, not invalidated%s): a promotion keeps it", host, slot, synced)
	case !exists && !s.Exists:
		// Before the first start: expected. A promotion now loses nothing, there is no slot.
		p.pass("standby %s: no copy of replication slot %s yet, as expected before cdc's first start; after it, a promotion is safe only once the standby's copy is failover-ready (synced, not temporary, not invalidated): cdc check --wait-failover-ready waits for that", host, slot)
	case s.Exists && !s.Synced:
		p.fail("drop the standby's own slot of that name; only a slot synchronised from the primary survives a promotion",
			"standby %s: replication slot %s is not failover-ready: %s", host, slot, s.NotReady())
	case s.HeldBack():
		p.fail(waitFailoverReadyFix+"; the primary's slot moves as cdc confirms what Kafka holds, and on an idle database SELECT pg_log_standby_snapshot() on the primary helps; the standby's log says why (\"could not synchronize replication slot\")",
			"standby %s: replication slot %s is not failover-ready: %s; a promotion now would drop it", host, slot, s.NotReady())
	default:
		p.fail(waitFailoverReadyFix+"; a new idle slot syncs once it has moved (SELECT pg_log_standby_snapshot() on the primary)",
			"standby %s: replication slot %s is not failover-ready: %s; a promotion now would lose it", host, slot, s.NotReady())
	}
}

// splitList splits a comma-separated setting such as synchronized_standby_slots.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.Trim(strings.TrimSpace(f), `"`); f != "" {
			out = append(out, f)
		}
	}
	return out
}
