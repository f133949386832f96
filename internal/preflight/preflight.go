package preflight

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/cdc/internal/posture"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/kafkaconn"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/schemareg"
	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/sink"
)

// checkLine is one prerequisite: ok, what was found, and for a failure the fix. A line that is
// only informative (a consequence to know about) has ok true and a note.
type checkLine struct {
	ok   bool
	warn bool // ok, but unsafe: printed with "!" and its fix
	what string
	fix  string
}

// checker runs the checks and collects their lines.
type checker struct {
	cfg   pipeline.Config
	lines []checkLine
	// user and database: who and where the PostgreSQL checks run (for the fixes they print).
	user, database string
	// pgMode is the sslmode the PostgreSQL configuration amounts to (its posture's Mode).
	pgMode string
	// registry is the schema registry's configuration (URL "" for none).
	registry schemareg.Config
}

func (p *checker) pass(format string, args ...any) {
	p.lines = append(p.lines, checkLine{ok: true, what: fmt.Sprintf(format, args...)})
}

// warn records a line that does not fail the check but says what is at risk and the fix.
func (p *checker) warn(fix, format string, args ...any) {
	p.lines = append(p.lines, checkLine{ok: true, warn: true, what: fmt.Sprintf(format, args...), fix: fix})
}

func (p *checker) fail(fix, format string, args ...any) {
	p.lines = append(p.lines, checkLine{what: fmt.Sprintf(format, args...), fix: fix})
}

// Run is `cdc check`: it prints each connection's TLS posture, connects to PostgreSQL and
// Kafka (and the schema registry when registry.URL is set), prints one line per prerequisite (✓,
// ! for a warning, or ✗, the last two with the fix) to w and reports whether everything needed
// holds; warnings do not fail it.
// It changes nothing on either side: it only reads catalogs and metadata, and asks Kafka to
// validate a topic creation without creating it.
func Run(ctx context.Context, cfg pipeline.Config, postures []posture.Posture, registry schemareg.Config, w io.Writer) (ok bool) {
	p := &checker{cfg: cfg, registry: registry}
	for _, tp := range postures {
		if tp.Conn == "PostgreSQL" {
			p.pgMode = tp.Mode
		}
		if tp.Warning != "" {
			p.warn(tp.Fix, "%s: %s", tp.Summary, tp.Warning)
		} else {
			p.pass("%s", tp.Summary)
		}
	}
	p.postgres(ctx)
	p.kafka(ctx)
	p.schemaRegistry(ctx)
	failed, warned := writeLines(w, p.lines)
	if failed > 0 {
		fmt.Fprintf(w, "\n%d of %d checks failed.\n", failed, len(p.lines))
		return false
	}
	if warned > 0 {
		fmt.Fprintf(w, "\nAll %d checks passed, %d with a warning (!).\n", len(p.lines), warned)
		return true
	}
	fmt.Fprintf(w, "\nAll %d checks passed.\n", len(p.lines))
	return true
}

// writeLines prints lines, a mark and the text each and their fixes indented below, and counts
// the failures and warnings among them.
func writeLines(w io.Writer, lines []checkLine) (failed, warned int) {
	for _, l := range lines {
		mark := "✓"
		switch {
		case !l.ok:
			mark = "✗"
			failed++
		case l.warn:
			mark = "!"
			warned++
		}
		fmt.Fprintf(w, "%s %s\n", mark, l.what)
		if l.fix != "" {
			fmt.Fprintf(w, "    fix: %s\n", l.fix)
		}
	}
	return failed, warned
}

// pgVerifyFix is the advice for a PostgreSQL connection that turned out not to be encrypted.
var pgVerifyFix = posture.PGFix("CDC_PG_URL")

func (p *checker) postgres(ctx context.Context) {
	cfg := p.cfg
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgcat.Connect(cctx, cfg.PGURL, pgcat.Timeouts{Connect: cfg.ConnectTimeout})
	if err != nil {
		p.fail("check CDC_PG_URL (host, port, database, user, password) and that the server is running",
			"PostgreSQL: cannot connect: %v", secret.ScrubError(err, cfg.PGURL))
		return
	}
	defer conn.Close(context.Background())
	var version, walLevel, user, database string
	var canReplicate, super bool
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('wal_level'), current_user,
			current_database(), r.rolreplication, r.rolsuper
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&version, &walLevel, &user, &database, &canReplicate, &super)
	if err != nil {
		p.fail("", "PostgreSQL: cannot read server settings: %v", err)
		return
	}
	p.user, p.database = user, database
	p.pass("PostgreSQL %s reachable, database %s as %s", version, database, user)
	p.connectionTLS(conn)
	p.standbySource(ctx, conn)
	if walLevel == "logical" {
		p.pass("wal_level = logical")
	} else {
		p.fail("ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL", "wal_level = %s, logical decoding needs logical", walLevel)
	}
	if canReplicate || super {
		p.pass("role %s may replicate (REPLICATION attribute%s)", user, map[bool]string{true: ", superuser", false: ""}[super])
	} else {
		p.fail(fmt.Sprintf("ALTER ROLE %s REPLICATION", change.QuoteIdent(user)), "role %s lacks the REPLICATION attribute", user)
	}
	p.capacity(ctx, conn)
	tables := p.publication(ctx, conn)
	for _, t := range tables {
		p.table(ctx, conn, t)
	}
	p.slot(ctx, conn)
	p.failover(ctx, conn)
}

// connectionTLS reports whether the connection just made is actually encrypted: with
// sslmode=prefer or allow, that depends on the server, which the configuration cannot tell.
func (p *checker) connectionTLS(conn *pgcat.Conn) {
	if tc, ok := conn.PgConn().Conn().(*tls.Conn); ok {
		p.pass("PostgreSQL connection: encrypted (%s)", tls.VersionName(tc.ConnectionState().Version))
		return
	}
	switch {
	case strings.HasPrefix(conn.PgConn().Conn().RemoteAddr().Network(), "unix"):
		p.pass("PostgreSQL connection: local Unix socket")
	case p.pgMode == "disable":
		p.pass("PostgreSQL connection: not encrypted, as configured (see above)")
	case p.pgMode == "":
		p.warn(pgVerifyFix, "PostgreSQL connection: not encrypted: data and credentials cross the network in plaintext")
	default:
		p.warn(pgVerifyFix, "PostgreSQL connection: not encrypted: the server offered no TLS and sslmode=%s fell back to plaintext", p.pgMode)
	}
}

// capacity checks headroom in replication slots and WAL senders: the main slot (unless it
// exists) and its stream need one each; a copy with the copy strategy needs one more of each
// while it starts.
func (p *checker) capacity(ctx context.Context, conn *pgcat.Conn) {
	var maxSlots, usedSlots, maxSenders, usedSenders int
	var haveSlot bool
	err := conn.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int,
			(SELECT count(*) FROM pg_replication_slots)::int,
			current_setting('max_wal_senders')::int,
			(SELECT count(*) FROM pg_stat_replication)::int,
			EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, p.cfg.Slot).
		Scan(&maxSlots, &usedSlots, &maxSenders, &usedSenders, &haveSlot)
	if err != nil {
		p.fail("", "cannot read replication capacity: %v", err)
		return
	}
	needSlots := 1 // a temporary slot while a snapshot of the copy strategy starts
	if !haveSlot {
		needSlots++
	}
	if free := maxSlots - usedSlots; free >= needSlots {
		p.pass("max_replication_slots = %d, %d in use: %d free, %d needed", maxSlots, usedSlots, free, needSlots)
	} else {
		p.fail(fmt.Sprintf("raise max_replication_slots to at least %d (restart needed), or drop unused slots", usedSlots+needSlots),
			"max_replication_slots = %d, %d in use: %d free, %d needed", maxSlots, usedSlots, free, needSlots)
	}
	needSenders := 2 // the stream, and a copy of the copy strategy as it starts
	if free := maxSenders - usedSenders; free >= needSenders {
		p.pass("max_wal_senders = %d, %d in use: %d free, %d needed", maxSenders, usedSenders, free, needSenders)
	} else {
		p.fail(fmt.Sprintf("raise max_wal_senders to at least %d (restart needed)", usedSenders+needSenders),
			"max_wal_senders = %d, %d in use: %d free, %d needed", maxSenders, usedSenders, free, needSenders)
	}
}

// publication checks the publication (or, with CDC_TABLES, that it can be created or extended)
// and returns the tables to check.
func (p *checker) publication(ctx context.Context, conn *pgcat.Conn) []change.ExportID {
	pub := p.cfg.Publication
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, pub).Scan(&exists); err != nil {
		p.fail("", "cannot read publication %s: %v", pub, err)
		return nil
	}
	var published []change.ExportID
	if exists {
		rows, err := conn.Query(ctx, `SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2`, pub)
		if err == nil {
			published, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (change.ExportID, error) {
				var e change.ExportID
				return e, r.Scan(&e.Schema, &e.Table)
			})
		}
		if err != nil {
			p.fail("", "cannot list the tables of publication %s: %v", pub, err)
			return nil
		}
	}
	if len(p.cfg.Tables) == 0 {
		switch {
		case !exists:
			p.fail(fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE ...; or set CDC_TABLES so Tidemark creates it", change.QuoteIdent(pub)),
				"publication %s does not exist", pub)
		case len(published) == 0:
			p.fail(fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE ...", change.QuoteIdent(pub)), "publication %s has no tables", pub)
		default:
			p.pass("publication %s: %d tables", pub, len(published))
		}
		return published
	}
	// CDC_TABLES: Tidemark creates the publication or adds the missing tables.
	missing := 0
	for _, t := range p.cfg.Tables {
		if !containsExport(published, t) {
			missing++
		}
	}
	if !exists {
		var canCreate bool
		_ = conn.QueryRow(ctx, `SELECT has_database_privilege(current_database(), 'CREATE')`).Scan(&canCreate)
		if canCreate {
			p.pass("publication %s does not exist; Tidemark will create it for the %d tables of CDC_TABLES", pub, len(p.cfg.Tables))
		} else {
			p.fail(fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s; or create the publication yourself", change.QuoteIdent(p.database), change.QuoteIdent(p.user)),
				"publication %s does not exist and the role may not create it", pub)
		}
	} else if missing > 0 {
		p.pass("publication %s exists; Tidemark will add %d tables of CDC_TABLES to it (it must own them)", pub, missing)
	} else {
		p.pass("publication %s holds every table of CDC_TABLES", pub)
	}
	return p.cfg.Tables
}

func containsExport(list []change.ExportID, e change.ExportID) bool {
	for _, x := range list {
		if x == e {
			return true
		}
	}
	return false
}

// table checks that t exists, can be read, and what its replica identity means.
func (p *checker) table(ctx context.Context, conn *pgcat.Conn, t change.ExportID) {
	var ident string
	var hasPK, canSelect, toastable bool
	err := conn.QueryRow(ctx, `SELECT c.relreplident::text,
			EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
			has_table_privilege(c.oid, 'SELECT'),
			EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attstorage IN ('x', 'e'))
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, t.Schema, t.Table).
		Scan(&ident, &hasPK, &canSelect, &toastable)
	if errors.Is(err, pgx.ErrNoRows) {
		p.fail("create it, or remove it from CDC_TABLES", "table %s does not exist", t)
		return
	}
	if err != nil {
		p.fail("", "table %s: %v", t, err)
		return
	}
	if canSelect {
		p.pass("table %s: SELECT granted", t)
	} else {
		p.fail(fmt.Sprintf("GRANT SELECT ON %s TO %s", pgcat.Table(t), change.QuoteIdent(p.user)), "table %s: no SELECT privilege", t)
	}
	large := ""
	if toastable {
		large = "; an update that leaves a large (TOASTed) value unchanged does not send it (REPLICA IDENTITY FULL sends it)"
	}
	switch {
	case ident == "f":
		p.pass("table %s: replica identity FULL: deletes and updates carry the whole old row", t)
	case ident == "i":
		p.pass("table %s: replica identity index: deletes carry the index columns, the record key%s", t, large)
	case ident == "d" && hasPK:
		p.pass("table %s: replica identity default (primary key): deletes carry the key only%s", t, large)
	default:
		p.fail(fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (...); or ALTER TABLE %s REPLICA IDENTITY FULL", pgcat.Table(t), pgcat.Table(t)),
			"table %s has no primary key or replica identity: PostgreSQL rejects UPDATE and DELETE on it once published, and its records have no key", t)
	}
	// The publication's column list and row filter (PostgreSQL 15).
	tbl, err := pgcat.LoadTable(ctx, conn, p.cfg.Publication, t)
	switch {
	case errors.Is(err, pgcat.ErrUnsupportedTable):
		p.fail("", "table %s: %v", t, err) // the error says how to fix it
	case err == nil && tbl.Published.Digest() != "":
		p.pass("table %s: published with %s; copies and changes carry only those", t, tbl.Published)
	}
}

// slot reports the main slot's state, the WAL it holds and max_slot_wal_keep_size.
func (p *checker) slot(ctx context.Context, conn *pgcat.Conn) {
	slot := p.cfg.Slot
	var (
		plugin, walStatus *string
		active            bool
		held              *int64
	)
	err := conn.QueryRow(ctx, `SELECT plugin, wal_status, active, pg_wal_lsn_diff(`+pgcat.WALPositionSQL+`, restart_lsn)::int8
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&plugin, &walStatus, &active, &held)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		p.pass("replication slot %s does not exist yet; Tidemark creates it at first start", slot)
	case err != nil:
		p.fail("", "cannot read replication slot %s: %v", slot, err)
	case plugin == nil || *plugin != "pgoutput":
		p.fail(fmt.Sprintf("drop it (SELECT pg_drop_replication_slot('%s')) or choose another CDC_SLOT", slot),
			"replication slot %s exists but is not a pgoutput logical slot", slot)
	case walStatus != nil && *walStatus == "lost":
		p.fail(fmt.Sprintf("changes were lost: drop the slot (SELECT pg_drop_replication_slot('%s')) and delete the watermark topic %s to copy every table again", slot, p.cfg.Sink.WatermarkTopic),
			"replication slot %s was invalidated (wal_status = lost)", slot)
	default:
		state := "inactive"
		if active {
			state = "active (another process streams from it; a second cdc waits as a standby)"
		}
		mib := int64(0)
		if held != nil {
			mib = *held >> 20
		}
		status := ""
		if walStatus != nil {
			status = *walStatus
		}
		p.pass("replication slot %s: %s, wal_status %s, holds %d MiB of WAL", slot, state, status, mib)
	}
	var keep string
	if err := conn.QueryRow(ctx, `SELECT current_setting('max_slot_wal_keep_size')`).Scan(&keep); err == nil {
		if keep == "-1" {
			p.pass("max_slot_wal_keep_size = -1: the slot may hold WAL without limit while Tidemark is down or behind; set a limit to protect the disk (the slot is then invalidated past it and Tidemark stops, asking for a new copy)")
		} else {
			p.pass("max_slot_wal_keep_size = %s: past it the slot is invalidated and Tidemark stops, asking for a new copy", keep)
		}
	}
}

func (p *checker) kafka(ctx context.Context) {
	cfg := p.cfg
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := cfg.Sink.Security.ClientOpts(); err != nil {
		p.fail("check the CDC_KAFKA_TLS_* and CDC_KAFKA_SASL_* variables", "Kafka security: %v", err)
		return
	}
	cl, err := kafkaconn.NewClient(kafkaconn.Settings{Brokers: cfg.Sink.Brokers, Security: cfg.Sink.Security, ClientID: "tidemark-check", DialTimeout: 5 * time.Second},
		kgo.RequestRetries(1))
	if err != nil {
		p.fail("check CDC_KAFKA_BROKERS", "Kafka: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	meta, err := adm.BrokerMetadata(cctx)
	if err != nil {
		if explained := kafkaconn.ExplainConnect(cfg.Sink.Security, err); explained != err {
			p.fail("see above", "Kafka brokers %s: %v", strings.Join(cfg.Sink.Brokers, ","), explained)
			return
		}
		p.fail("check CDC_KAFKA_BROKERS and that the brokers are running and reachable from here",
			"Kafka brokers %s: not reachable: %v", strings.Join(cfg.Sink.Brokers, ","), err)
		return
	}
	p.pass("Kafka: %d brokers reachable (cluster %s)", len(meta.Brokers), meta.Cluster)
	// Last, after the transactions check below has made Kafka create its transaction state log.
	defer p.replication(ctx, cl, meta.Brokers.NodeIDs())

	// Topic creation, validated by the broker without creating anything.
	topic := cfg.Sink.WatermarkTopic
	req := kmsg.NewPtrCreateTopicsRequest()
	req.ValidateOnly = true
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions = 1
	rt.ReplicationFactor = -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(cctx, cl)
	switch {
	case err != nil:
		p.fail("", "Kafka: cannot ask whether topics may be created: %v", err)
	case len(resp.Topics) == 1 && resp.Topics[0].ErrorCode != 0:
		if resp.Topics[0].ErrorCode == kerr.TopicAlreadyExists.Code {
			p.pass("Kafka: topic %s exists", topic)
		} else {
			p.fail("grant CREATE on the cluster or on topics with the prefix "+cfg.TopicPrefix+" (ACLs), or create the topics beforehand",
				"Kafka: creating topic %s would fail: %s", topic, errName(resp.Topics[0].ErrorCode))
		}
	default:
		p.pass("Kafka: topic creation allowed (validated for %s, nothing created)", topic)
	}

	if cfg.Sink.Delivery != sink.ExactlyOnce {
		p.pass("Kafka: at-least-once delivery: no transactions needed")
		return
	}
	// Transactions: finding the transaction coordinator of each transactional id that cdc run
	// uses (the sink's and its large producer's) reads metadata only (no producer id is taken,
	// so a running instance is not fenced), and needs the DESCRIBE that the ids' ACLs grant.
	// The ids name the database: without it (PostgreSQL unreachable, already a failure) any id
	// tells whether transactions work.
	txnID := "tidemark-check"
	if p.database != "" {
		txnID = pipeline.TransactionalID(p.database, cfg.Slot)
	}
	for _, id := range []string{txnID, txnID + sink.LargeTransactionalIDSuffix} {
		if !p.transactions(cctx, cl, id) {
			return
		}
	}
	p.pass("Kafka: transactions available (exactly-once)")
}

// transactions finds the transaction coordinator of txnID and reports whether it could.
func (p *checker) transactions(cctx context.Context, cl *kgo.Client, txnID string) bool {
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType = 1 // transaction
	fc.CoordinatorKey = txnID
	fc.CoordinatorKeys = []string{txnID}
	// A cluster that never ran a transaction creates its transaction-state topic now: the
	// coordinator is "not available" until it has.
	var fr *kmsg.FindCoordinatorResponse
	var err error
	for {
		fr, err = fc.RequestWith(cctx, cl)
		if err != nil || cctx.Err() != nil {
			break
		}
		code := fr.ErrorCode
		if len(fr.Coordinators) > 0 {
			code = fr.Coordinators[0].ErrorCode
		}
		if e := kerr.ErrorForCode(code); e == nil || !kerr.IsRetriable(e) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	switch {
	case err != nil:
		p.fail("", "Kafka: cannot find a transaction coordinator: %v", err)
	case len(fr.Coordinators) > 0 && fr.Coordinators[0].ErrorCode != 0:
		p.fail("exactly-once needs transactions: grant WRITE and DESCRIBE on transactional id "+txnID+" (ACLs), make sure the __transaction_state topic can be created (transaction.state.log.replication.factor <= brokers), or set CDC_DELIVERY=at-least-once",
			"Kafka: transactions unavailable: %s", errName(fr.Coordinators[0].ErrorCode))
	case len(fr.Coordinators) == 0 && fr.ErrorCode != 0:
		p.fail("exactly-once needs transactions, or set CDC_DELIVERY=at-least-once", "Kafka: transactions unavailable: %s", errName(fr.ErrorCode))
	default:
		return true
	}
	return false
}

// errName names a Kafka error code (its message when known).
func errName(code int16) string {
	if err := kerr.ErrorForCode(code); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("error code %d", code)
}
