package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/wait"
)

// acl is one grant of the least-privilege deployment: principal may do ops on the resources of
// type typ named name (a prefix when prefixed).
type acl struct {
	principal string
	typ       string // "topic" or "transactional-id"
	name      string
	prefixed  bool
	ops       []kadm.ACLOperation
}

// leastPrivilege returns the ACLs of docs/production.md ("Kafka ACLs: least privilege") for a
// deployment with topic prefix prefix whose cdc uses transactional id txnID (and its large
// producer's, txnID + sink.LargeTransactionalIDSuffix): cdc writes the
// topics, the applier only reads them.
func leastPrivilege(cdc, applier, prefix, txnID string) []acl {
	return []acl{
		{cdc, "topic", prefix + ".", true, []kadm.ACLOperation{kadm.OpCreate, kadm.OpDescribe, kadm.OpDescribeConfigs, kadm.OpWrite, kadm.OpRead}},
		{cdc, "transactional-id", txnID, false, []kadm.ACLOperation{kadm.OpDescribe, kadm.OpWrite}},
		{cdc, "transactional-id", txnID + sink.LargeTransactionalIDSuffix, false, []kadm.ACLOperation{kadm.OpDescribe, kadm.OpWrite}},
		{applier, "topic", prefix + ".", true, []kadm.ACLOperation{kadm.OpDescribe, kadm.OpRead}},
	}
}

// grant creates acls on k as its super user.
func grant(t *testing.T, k *testenv.ACLKafka, acls []acl) {
	t.Helper()
	adm := k.AdminClient(t)
	for _, a := range acls {
		b := kadm.NewACLs().Allow("User:" + a.principal).AllowHosts("*").Operations(a.ops...)
		switch a.typ {
		case "topic":
			b.Topics(a.name)
		case "transactional-id":
			b.TransactionalIDs(a.name)
		default:
			t.Fatalf("acl on %s: unknown resource type", a.typ)
		}
		if a.prefixed {
			b.ResourcePatternType(kadm.ACLPatternPrefixed)
		}
		res, err := adm.CreateACLs(t.Context(), b)
		if err != nil {
			t.Fatalf("create ACLs %+v: %v", a, err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("create ACL %s %s %s %s: %v %s", r.Principal, r.Type, r.Name, r.Operation, r.Err, r.ErrMessage)
			}
		}
	}
}

// TestLeastPrivilegeACLs runs cdc and tidemark-apply against a broker that authorizes every
// request (the standard authorizer, no access without an ACL), each as its own principal with
// exactly the ACLs docs/production.md lists, and applies into a target whose role is no
// superuser and holds only the grants production.md lists. cdc copies, streams and restarts;
// the applier keeps the target equal to the source. The authorizer refused neither of them
// anything. Then, as the applier's principal: producing to the watermark topic or to a data
// topic is refused (TOPIC_AUTHORIZATION_FAILED; an idempotent producer gets no producer id:
// CLUSTER_AUTHORIZATION_FAILED), and so are a transaction under cdc's transactional id
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), creating a topic under the prefix and deleting
// records (TOPIC_AUTHORIZATION_FAILED).
func TestLeastPrivilegeACLs(t *testing.T) {
	k := testenv.StartACLKafka(t)
	e := newEnv(t)
	ctx := t.Context()
	e.brokers = []string{k.Brokers}
	const tables = `CREATE TABLE orders (id int PRIMARY KEY, note text);
CREATE TABLE items (id int PRIMARY KEY, qty int)`
	e.exec(tables,
		`INSERT INTO orders SELECT g, 'o' || g FROM generate_series(1, 100) g`,
		`INSERT INTO items SELECT g, g FROM generate_series(1, 50) g`,
		`CREATE PUBLICATION it_pub FOR TABLE orders, items`)
	txnID := "tidemark-" + dbName(t, e.pgURL) + "-" + e.slot // as production.md names it: tidemark-<database>-<slot>
	grant(t, k, leastPrivilege(k.CDC.Name, k.Applier.Name, e.prefix, txnID))
	t.Cleanup(func() {
		if t.Failed() {
			for _, user := range []string{k.CDC.Name, k.Applier.Name} {
				t.Logf("the authorizer refused %s:\n%s", user, strings.Join(k.Refusals(t, user), "\n"))
			}
		}
	})

	// The target: the same tables, items holding a row of an earlier run (set aside in a
	// temporary table while the copy loads), and the applier's role.
	replica := testenv.NewDB(t)
	testenv.Exec(t, replica, tables, `INSERT INTO items VALUES (999, 9)`)
	role := applierRole(t, replica)

	cdcVars := merge(e.baseVars(), k.CDC.Env())
	if res := runCDC(t, cdcVars, time.Minute, "check"); res.code != 0 {
		t.Errorf("cdc check as %s with the documented ACLs: exit %d\n%s", k.CDC.Name, res.code, res.out)
	}
	p := e.startCDC(cdcVars)
	a := e.startBinary(applyBinary, merge(k.Applier.Env(), map[string]string{
		"APPLY_TARGET_URL":  withUser(t, replica, role),
		"APPLY_TABLES":      "public.orders,public.items",
		"CDC_KAFKA_BROKERS": k.Brokers,
		"CDC_TOPIC_PREFIX":  e.prefix,
		"APPLY_LOG_FORMAT":  "text",
	}))
	// Watermarks read as the applier: its ACLs are those of any reader.
	waitWatermarks := func(p *proc) {
		t.Helper()
		w, err := wait.New(e.brokers, e.watermarkTopic(), k.Applier.Opts()...)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if _, err := w.Until(wctx, e.currentLSN(ctx), change.ExportID{Schema: "public", Table: "orders"},
			change.ExportID{Schema: "public", Table: "items"}); err != nil {
			t.Fatalf("watermarks: %v\n%s", err, tail(p.log.String(), 4000))
		}
	}
	waitWatermarks(p)
	// A run of new rows goes through a temporary staging table (COPY, then INSERT ... SELECT).
	e.exec(`UPDATE orders SET note = 'changed' WHERE id <= 10`, `DELETE FROM orders WHERE id > 90`,
		`INSERT INTO orders SELECT g, 'bulk' FROM generate_series(2000, 2099) g`,
		`TRUNCATE items`, `INSERT INTO items VALUES (1000, 1)`)
	waitWatermarks(p)
	// A restart: the topics exist now (their configs are read, the watermark topic's too), the
	// watermark topic is read back, and the new producer fences the old one's transactional id.
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("cdc exited with %d\n%s", code, tail(p.log.String(), 4000))
	}
	p = e.startCDC(cdcVars)
	e.exec(`INSERT INTO orders VALUES (1000, 'after the restart')`, `UPDATE items SET qty = 7`)
	waitWatermarks(p)

	deadline := time.Now().Add(2 * time.Minute)
	for {
		var diffs []string
		for _, table := range []string{"orders", "items"} {
			src, dst := tableText(t, e.pgURL, table), tableText(t, replica, table)
			if fmt.Sprint(src) != fmt.Sprint(dst) {
				diffs = append(diffs, fmt.Sprintf("%s: source %d rows, target %d rows (or values differ)", table, len(src), len(dst)))
			}
		}
		if len(diffs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target did not reach the source: %s", strings.Join(diffs, "; "))
		}
		time.Sleep(300 * time.Millisecond)
	}
	for name, p := range map[string]*proc{"cdc": p, "tidemark-apply": a} {
		if done, err := p.exited(); done {
			t.Errorf("%s exited: %v", name, err)
		}
	}
	for _, user := range []string{k.CDC.Name, k.Applier.Name} {
		if denied := k.Refusals(t, user); len(denied) > 0 {
			t.Errorf("the authorizer refused %s %d times with the documented ACLs:\n%s", user, len(denied), strings.Join(denied, "\n"))
		}
	}

	// The applier's principal may not write what it reads: a plain produce is refused on the
	// topic, and franz-go's default, idempotent, producer already at InitProducerId (Kafka
	// grants a producer id to a principal with WRITE on some topic, and it has none).
	record := func(topic string) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(`{"export":"public.orders"}`), Value: []byte(`{}`)}
	}
	for _, topic := range []string{e.watermarkTopic(), e.topic("public.orders")} {
		plain := k.Client(t, k.Applier, kgo.DisableIdempotentWrite(), kgo.RequestRetries(0))
		if err := plain.ProduceSync(ctx, record(topic)).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Errorf("produce to %s as %s: %v, want TOPIC_AUTHORIZATION_FAILED", topic, k.Applier.Name, err)
		}
		idempotent := k.Client(t, k.Applier, kgo.RequestRetries(0))
		if err := idempotent.ProduceSync(ctx, record(topic)).FirstErr(); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
			t.Errorf("idempotent produce to %s as %s: %v, want CLUSTER_AUTHORIZATION_FAILED", topic, k.Applier.Name, err)
		}
	}
	tx := k.Client(t, k.Applier, kgo.TransactionalID(txnID))
	err := tx.BeginTransaction()
	if err == nil {
		err = tx.ProduceSync(ctx, record(e.watermarkTopic())).FirstErr()
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Errorf("transaction as %s under cdc's transactional id: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", k.Applier.Name, err)
	}
	adm := kadm.NewClient(k.Client(t, k.Applier))
	created, err := adm.CreateTopic(ctx, 1, -1, nil, e.prefix+".public.forged")
	if err == nil {
		err = created.Err
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("create a topic under the prefix as %s: %v, want TOPIC_AUTHORIZATION_FAILED", k.Applier.Name, err)
	}
	recs := kadm.Offsets{}
	recs.Add(kadm.Offset{Topic: e.watermarkTopic(), Partition: 0, At: 1})
	deleted, err := adm.DeleteRecords(ctx, recs)
	if err == nil {
		err = deleted.Error()
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("delete records of %s as %s: %v, want TOPIC_AUTHORIZATION_FAILED", e.watermarkTopic(), k.Applier.Name, err)
	}
}

// applierRole creates a login role for tidemark-apply in the target database at dbURL: no
// superuser, and only the grants of docs/production.md. The database's default grants to PUBLIC
// are revoked, so that the role holds nothing it was not given here.
func applierRole(t *testing.T, dbURL string) string {
	t.Helper()
	role := "it_applier_" + strconv.FormatInt(time.Now().UnixNano()%1_000_000, 10)
	db := pgIdent(dbName(t, dbURL))
	admin := testenv.PGURL(t)
	testenv.Exec(t, admin, fmt.Sprintf(`CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION`, role))
	t.Cleanup(func() {
		testenv.Exec(t, dbURL, "DROP OWNED BY "+role)
		testenv.Exec(t, admin, "DROP ROLE IF EXISTS "+role)
	})
	testenv.Exec(t, dbURL,
		`REVOKE ALL ON DATABASE `+db+` FROM PUBLIC`,
		fmt.Sprintf(`GRANT CONNECT, TEMPORARY ON DATABASE %s TO %s`, db, role),
		fmt.Sprintf(`GRANT USAGE, CREATE ON SCHEMA public TO %s`, role),
		fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public.orders, public.items TO %s`, role))
	var super bool
	conn := testenv.Conn(t, withUser(t, dbURL, role))
	if err := conn.QueryRow(t.Context(), `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil || super {
		t.Fatalf("role %s: superuser %v (%v), want a role that is not", role, super, err)
	}
	conn.Close(t.Context())
	return role
}

// dbName is the database of a PostgreSQL URL.
func dbName(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

func pgIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
