package preflight

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/secret"
)

// standbyDoc is where capture from a standby, and its trade-off, are described.
const standbyDoc = "docs/production.md, Capture from a standby"

// standbySource reports, when CDC_PG_URL names a hot standby, what capture from it needs: PostgreSQL
// 16+, hot_standby_feedback and a physical slot on the standby, no failover slot; and on the
// primary (CDC_PG_PRIMARY_URL) wal_level = logical, the same cluster, and the right to ask for
// running-transactions records. Without CDC_PG_PRIMARY_URL it says what that implies. On a
// primary it says nothing, except that CDC_PG_PRIMARY_URL is not used.
func (p *checker) standbySource(ctx context.Context, conn *pgcat.Conn) (standby bool) {
	inRecovery, err := pgcat.InRecovery(ctx, conn)
	if err != nil {
		p.fail("", "%v", err)
		return false
	}
	if !inRecovery {
		if p.cfg.PrimaryURL != "" {
			p.pass("CDC_PG_PRIMARY_URL is set but CDC_PG_URL names a primary: it is not used")
		}
		return false
	}
	version := conn.PgConn().ParameterStatus("server_version")
	if pgcat.ServerMajor(version) < pgcat.StandbyMajor {
		p.fail("point CDC_PG_URL at the primary, or upgrade ("+standbyDoc+")",
			"PostgreSQL %s is a hot standby (in recovery): logical decoding on a standby needs PostgreSQL %d or later", version, pgcat.StandbyMajor)
		return true
	}
	p.pass("PostgreSQL is a hot standby (in recovery): the slot, the stream and the copies are on it (%s)", standbyDoc)
	if p.cfg.SlotFailover {
		p.fail("set CDC_SLOT_FAILOVER=false to capture from the standby, or point CDC_PG_URL at the primary",
			"CDC_SLOT_FAILOVER=true, but a failover slot lives on the primary: cdc refuses it on a standby")
	}
	var feedback, primarySlot string
	if err := conn.QueryRow(ctx, `SELECT current_setting('hot_standby_feedback'), current_setting('primary_slot_name')`).Scan(&feedback, &primarySlot); err != nil {
		p.fail("", "cannot read the standby's settings: %v", err)
		return true
	}
	if feedback == "on" {
		p.pass("hot_standby_feedback = on on the standby: the primary keeps the catalog rows the slot needs")
	} else {
		p.fail("on the standby: ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf();",
			"hot_standby_feedback = %s on the standby: the primary may remove catalog rows the slot still needs, and PostgreSQL then invalidates the slot (every table copied again)", feedback)
	}
	if primarySlot != "" {
		p.pass("primary_slot_name = %s on the standby: hot_standby_feedback holds while it is disconnected", primarySlot)
	} else {
		p.warn("create a physical slot on the primary (SELECT pg_create_physical_replication_slot('standby1')) and set primary_slot_name on the standby",
			"primary_slot_name is empty on the standby: while it is disconnected the primary forgets its feedback and may remove catalog rows the slot needs")
	}
	if p.cfg.PrimaryURL == "" {
		p.pass("CDC_PG_PRIMARY_URL is not set: nothing is written on the primary; tables are copied with the copy strategy (one exported snapshot per copy, a transaction open on the standby for the whole copy, started over after a restart), and creating a slot waits for the primary's next running-transactions record (every 15 s while it has writes)")
		p.pass("wal_level on the primary cannot be read without CDC_PG_PRIMARY_URL; it must be logical, or creating the slot on the standby fails")
		p.publicationOnStandby(ctx, conn)
		return true
	}
	p.primary(ctx, conn, primarySlot)
	return true
}

// publicationOnStandby fails when CDC_TABLES asks for a publication change that only the
// primary can make and there is no connection to it.
func (p *checker) publicationOnStandby(ctx context.Context, conn *pgcat.Conn) {
	if len(p.cfg.Tables) == 0 {
		return
	}
	published, err := pgcat.PublishedTables(ctx, conn, p.cfg.Publication)
	if err != nil {
		published = nil // no publication yet
	}
	var missing []change.ExportID
	for _, t := range p.cfg.Tables {
		if _, ok := published[t]; !ok {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		p.fail(fmt.Sprintf("on the primary: CREATE PUBLICATION %s FOR TABLE ... (or ALTER PUBLICATION ... ADD TABLE); or set CDC_PG_PRIMARY_URL", change.QuoteIdent(p.cfg.Publication)),
			"publication %s lacks %d table(s) of CDC_TABLES, and a standby cannot change it", p.cfg.Publication, len(missing))
	}
}

// primary checks CDC_PG_PRIMARY_URL: it connects, is the standby's primary, has wal_level =
// logical, may call pg_log_standby_snapshot(), and holds the standby's physical slot.
func (p *checker) primary(ctx context.Context, standby *pgcat.Conn, primarySlot string) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgcat.Connect(cctx, p.cfg.PrimaryURL, pgcat.Timeouts{Connect: p.cfg.ConnectTimeout})
	if err != nil {
		p.fail("check CDC_PG_PRIMARY_URL (host, port, database, user, password) and that the primary is running",
			"the primary (CDC_PG_PRIMARY_URL): cannot connect: %v", secret.ScrubError(err, p.cfg.PrimaryURL))
		return
	}
	defer conn.Close(context.Background())
	var inRecovery, canNudge bool
	var walLevel string
	var slotActive *bool
	err = conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_setting('wal_level'),
			has_function_privilege('pg_catalog.pg_log_standby_snapshot()', 'EXECUTE'),
			(SELECT active FROM pg_replication_slots WHERE slot_name = $1 AND slot_type = 'physical')`, primarySlot).
		Scan(&inRecovery, &walLevel, &canNudge, &slotActive)
	if err != nil {
		p.fail("", "the primary (CDC_PG_PRIMARY_URL): cannot read its settings: %v", err)
		return
	}
	if inRecovery {
		p.fail("point CDC_PG_PRIMARY_URL at the standby's primary", "CDC_PG_PRIMARY_URL names a server in recovery (a standby): it cannot write")
		return
	}
	ours, err1 := pgcat.SystemIdentifier(ctx, standby)
	theirs, err2 := pgcat.SystemIdentifier(ctx, conn)
	switch {
	case err1 != nil || err2 != nil:
		p.pass("CDC_PG_PRIMARY_URL connects to a primary (PostgreSQL %s); whether it is the standby's cannot be read (pg_control_system())", conn.PgConn().ParameterStatus("server_version"))
	case ours != theirs:
		p.fail("point CDC_PG_PRIMARY_URL at the standby's primary",
			"CDC_PG_PRIMARY_URL names another cluster (system identifier %s) than the standby (%s): what cdc writes there never reaches the standby", theirs, ours)
		return
	default:
		p.pass("CDC_PG_PRIMARY_URL connects to the standby's primary (system identifier %s): chunked copies write their markers there, and slot creation asks it for running-transactions records", ours)
	}
	if walLevel == "logical" {
		p.pass("wal_level = logical on the primary")
	} else {
		p.fail("on the primary: ALTER SYSTEM SET wal_level = logical; then restart it", "wal_level = %s on the primary: decoding on the standby needs logical", walLevel)
	}
	if canNudge {
		p.pass("the primary's role may call pg_log_standby_snapshot(): slot creation on the standby goes on at once")
	} else {
		p.warn("on the primary: GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO <the role of CDC_PG_PRIMARY_URL>",
			"the primary's role may not call pg_log_standby_snapshot(): creating a slot on the standby waits for the primary's next running-transactions record (every 15 s while it has writes)")
	}
	switch {
	case primarySlot == "":
	case slotActive == nil:
		p.warn(fmt.Sprintf("on the primary: SELECT pg_create_physical_replication_slot('%s')", primarySlot),
			"the standby's primary_slot_name %s is not a physical slot on the primary", primarySlot)
	case !*slotActive:
		p.warn("check the standby's replication (primary_conninfo)", "the standby's physical slot %s on the primary is not streaming", primarySlot)
	default:
		p.pass("the standby streams from physical slot %s on the primary", primarySlot)
	}
}
