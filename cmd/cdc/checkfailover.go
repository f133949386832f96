package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
)

// failoverDoc is where the set-up of both servers is described.
const failoverDoc = "docs/production.md, Failover"

// failover reports what a failover to a standby needs (PostgreSQL 17+): the slot is a failover
// slot, synchronized_standby_slots names the standby's physical slot, that slot is streaming,
// and on the standby (when CDC_PG_URL names it as another host) the slot is synced and
// sync_replication_slots and hot_standby_feedback are on. Without CDC_SLOT_FAILOVER and without
// a failover slot it says nothing, unless the server has streaming standbys.
func (p *preflight) failover(ctx context.Context, conn *pgcat.Conn) {
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
		// Capture from the standby: its own lines (checkstandby.go) say what it needs.
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
	p.standby(ctx)
}

// standbySlot reports the physical slot name of synchronized_standby_slots on the primary.
func (p *preflight) standbySlot(ctx context.Context, conn *pgcat.Conn, name string) {
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

// standby connects to a standby among CDC_PG_URL's hosts and reports whether the slot is synced
// there; without one it says what to verify on the standby.
func (p *preflight) standby(ctx context.Context) {
	slot := p.cfg.Slot
	verify := fmt.Sprintf("on the standby: sync_replication_slots = on, hot_standby_feedback = on, primary_slot_name set, primary_conninfo with dbname, and SELECT synced FROM pg_replication_slots WHERE slot_name = '%s' is true", slot)
	cfg, err := pgcat.ParseConfig(p.cfg.PGURL, pgcat.Timeouts{Connect: p.cfg.ConnectTimeout})
	if err != nil || len(cfg.Fallbacks) == 0 {
		p.pass("standby: CDC_PG_URL names one host, so cdc check cannot see it; verify %s", verify)
		return
	}
	cfg.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsStandby
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgcat.Dial(cctx, cfg)
	if err != nil {
		p.warn(verify, "standby: none of CDC_PG_URL's other hosts is a reachable standby (%v)", err)
		return
	}
	defer conn.Close(context.Background())
	host := conn.PgConn().Conn().RemoteAddr().String()
	var syncSlots, feedback string
	var found, synced, failover bool
	err = conn.QueryRow(ctx, `SELECT current_setting('sync_replication_slots'), current_setting('hot_standby_feedback'),
			EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
			coalesce((SELECT synced FROM pg_replication_slots WHERE slot_name = $1), false),
			coalesce((SELECT failover FROM pg_replication_slots WHERE slot_name = $1), false)`, slot).
		Scan(&syncSlots, &feedback, &found, &synced, &failover)
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
	switch {
	case found && synced && failover:
		p.pass("standby %s: replication slot %s is synced (a promotion keeps it)", host, slot)
	case found:
		p.fail("drop the standby's own slot of that name; only a slot synchronised from the primary survives a promotion",
			"standby %s: replication slot %s exists but is not synced from the primary", host, slot)
	default:
		p.fail("wait for the sync worker, or run SELECT pg_sync_replication_slots() on the standby; a new idle slot syncs once it has moved (SELECT pg_log_standby_snapshot() on the primary) ("+failoverDoc+")",
			"standby %s: replication slot %s is not synced yet: a promotion now would lose it", host, slot)
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
