package integration

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/wait"
	"github.com/tidemark/cdc/pkg/watermark"
)

// normKey re-encodes a JSON key object canonically (sorted names, encoding/json's escaping), so
// that keys built by the service and by PostgreSQL compare equal when they mean the same.
func normKey(t testing.TB, raw []byte) string {
	t.Helper()
	if raw == nil {
		return ""
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("key %q is not a JSON object: %v", raw, err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// normState re-keys a materialised state (or a table state) with normKey.
func normState(t testing.TB, in map[string]map[string]json.RawMessage) map[string]map[string]json.RawMessage {
	t.Helper()
	out := make(map[string]map[string]json.RawMessage, len(in))
	for k, v := range in {
		out[normKey(t, []byte(k))] = v
	}
	return out
}

// listTopics returns the topics whose names start with prefix.
func (e *env) listTopics(prefix string) []string {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		e.t.Fatalf("list topics: %v", err)
	}
	var out []string
	for _, name := range td.Names() {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out
}

// topicConfig returns one config value of topic ("" when unset).
func (e *env) topicConfig(topic, key string) string {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		e.t.Fatalf("describe configs of %s: %v", topic, err)
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key == key && c.Value != nil {
				return *c.Value
			}
		}
	}
	return ""
}

// TestUnicodeAndQuotedIdentifiers: a schema, table and columns whose names need quoting, hold
// non-ASCII letters, quotes and spaces, stream to a sanitised topic and round-trip.
func TestUnicodeAndQuotedIdentifiers(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const table = `"Ünïcode Schema"."Order ""Lines"""`
	id := change.ExportID{Schema: "Ünïcode Schema", Table: `Order "Lines"`}
	if got, err := change.ParseExportID(table); err != nil || got != id {
		t.Fatalf("ParseExportID(%s) = %+v, %v; want %+v", table, got, err, id)
	}
	e.exec(
		`CREATE SCHEMA "Ünïcode Schema"`,
		`CREATE TABLE `+table+` ("Kéy ""1""" int PRIMARY KEY, "Quote""d col" text, "spaced col" int,
			"ñame" text, "MixedCase" text, "Emoji 😀" text, "back\slash" jsonb)`,
		`INSERT INTO `+table+` SELECT g, 'q"' || g, g * 10, 'ñ' || g, 'M' || g, '😀' || g, jsonb_build_object('ü', g)
			FROM generate_series(1, 20) g`,
	)
	vars := e.baseVars()
	vars["CDC_TABLES"] = table
	p := e.startCDC(vars)
	recs := e.waitFor(p, 2*time.Minute, 1, table)
	if r := recs[id]; r.State != watermark.StateHydrated {
		t.Errorf("watermark record of %v: state %s, want hydrated", id, r.State)
	}

	e.exec(
		`INSERT INTO `+table+` VALUES (100, 'new "row"', 1, 'ñew', 'Mixed', '😀😀', '{"k": "\u00e9"}')`,
		`UPDATE `+table+` SET "Quote""d col" = 'updated ''q''', "ñame" = NULL WHERE "Kéy ""1""" <= 5`,
		`UPDATE `+table+` SET "Kéy ""1""" = 1000 WHERE "Kéy ""1""" = 6`,
		`DELETE FROM `+table+` WHERE "Kéy ""1""" IN (7, 8)`,
	)
	lsn := e.insertLSN(ctx)
	recs = e.waitFor(p, 2*time.Minute, lsn, table)

	want := change.TopicName(e.prefix, id)
	if strings.ContainsAny(want, `" Üï`) {
		t.Fatalf("TopicName %q is not sanitised", want)
	}
	if got := recs[id].Topic; got != want {
		t.Errorf("watermark record names topic %q, want %q", got, want)
	}
	topics := e.listTopics(e.prefix + ".")
	if len(topics) != 2 || !containsString(topics, want) || !containsString(topics, e.watermarkTopic()) {
		t.Errorf("topics with prefix %s: %q; want exactly %q and %q", e.prefix, topics, want, e.watermarkTopic())
	}

	data := e.readTopic(want)
	for _, r := range data {
		if r.Value == nil {
			continue
		}
		var v struct {
			Source struct{ Schema, Table string } `json:"source"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		if v.Source.Schema != id.Schema || v.Source.Table != id.Table {
			t.Fatalf("record at offset %d names %q.%q, want %q.%q", r.Offset, v.Source.Schema, v.Source.Table, id.Schema, id.Table)
		}
	}
	checkOrder(t, data)
	got := normState(t, materialize(t, data))
	assertSameState(t, table, got, normState(t, e.tableState(table, `Kéy "1"`)))
	if _, ok := got[`{"Kéy \"1\"":1000}`]; !ok {
		t.Errorf("key-changing update: key 1000 missing from the topic")
	}
	if row := got[`{"Kéy \"1\"":100}`]; string(row["Emoji 😀"]) != `"😀😀"` || string(row["back\\slash"]) != `{"k": "é"}` {
		t.Errorf("row 100: Emoji 😀 = %s, back\\slash = %s", row["Emoji 😀"], row["back\\slash"])
	}
}

// insertLSN is the server's WAL insert position: unlike pg_current_wal_lsn (the write
// position, which lags behind commits under synchronous_commit=off), it is past every
// transaction committed before the call.
func (e *env) insertLSN(ctx context.Context) change.LSN {
	e.t.Helper()
	var s string
	if err := e.conn().QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	l, err := change.ParseLSN(s)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// bigRowSQL inserts row id into big_rows: a text of textMiB MiB and a bytea of byteaMiB MiB,
// both incompressible-looking and different per id.
func bigRowSQL(table string, id, textMiB, byteaMiB int) string {
	return fmt.Sprintf(`INSERT INTO %s (id, t, b) VALUES (%d,
		(SELECT string_agg(md5(g::text || '-%d'), '') FROM generate_series(1, %d) g) || 'ü"\end',
		(SELECT decode(string_agg(md5(g::text || '+%d'), ''), 'hex') FROM generate_series(1, %d) g))`,
		table, id, id, textMiB<<20/32, id, byteaMiB<<20/16)
}

// TestLargeRowsRoundTrip: a row of several MiB (3 MiB text, 2 MiB bytea; its record is about
// 6 MiB) round-trips exactly through the snapshot and through replication, below the sink's
// documented limit (sink.MaxRecordBytes).
func TestLargeRowsRoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE big_rows (id int PRIMARY KEY, t text, b bytea)`,
		// FULL: an update then carries both big values twice (before and after, about 12 MiB),
		// and the unchanged out-of-line bytea is taken from the old tuple.
		`ALTER TABLE big_rows REPLICA IDENTITY FULL`,
		`CREATE TABLE small (id int PRIMARY KEY, v text)`,
		bigRowSQL("big_rows", 1, 3, 2),
		`INSERT INTO small VALUES (1, 'one')`,
	)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.big_rows,public.small"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, 1, "public.big_rows", "public.small")
	e.exec(bigRowSQL("big_rows", 2, 3, 2), `INSERT INTO small VALUES (2, 'two')`)
	// An update carries the big values in after (and, for FULL identity, before).
	e.exec(`UPDATE big_rows SET t = t || 'x' WHERE id = 1`)
	lsn := e.insertLSN(ctx)
	e.waitFor(p, 2*time.Minute, lsn, "public.big_rows", "public.small")

	type digest struct{ t, b string }
	wantDigest := map[int]digest{}
	c := e.conn()
	rows, err := c.Query(ctx, `SELECT id, md5(t), md5(b) FROM big_rows`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		var d digest
		if err := rows.Scan(&id, &d.t, &d.b); err != nil {
			t.Fatal(err)
		}
		wantDigest[id] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	recs := e.readTopic(e.topic("public.big_rows"))
	var ops []string
	maxSize := 0
	for _, r := range recs {
		maxSize = max(maxSize, len(r.Value))
		if env := decode(t, r); env != nil {
			ops = append(ops, env.Op)
		}
	}
	if got := strings.Join(ops, ","); got != "r,c,u" {
		t.Errorf("ops %s, want r,c,u", got)
	}
	if maxSize < 5<<20 || maxSize > sink.MaxRecordBytes {
		t.Errorf("largest record %d bytes: the test wants rows between 5 MiB and %d", maxSize, sink.MaxRecordBytes)
	}
	state := materialize(t, recs)
	for id, want := range wantDigest {
		row := state[fmt.Sprintf(`{"id":%d}`, id)]
		if row == nil {
			t.Errorf("row %d missing from the topic", id)
			continue
		}
		var text, b64 string
		if err := json.Unmarshal(row["t"], &text); err != nil {
			t.Fatalf("row %d t: %v", id, err)
		}
		if err := json.Unmarshal(row["b"], &b64); err != nil {
			t.Fatalf("row %d b: %v", id, err)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("row %d b is not base64: %v", id, err)
		}
		if got := md5hex([]byte(text)); got != want.t {
			t.Errorf("row %d: text of %d bytes has md5 %s, table has %s", id, len(text), got, want.t)
		}
		if got := md5hex(raw); got != want.b {
			t.Errorf("row %d: bytea of %d bytes has md5 %s, table has %s", id, len(raw), got, want.b)
		}
	}
	assertSameState(t, "small", materialize(t, e.readTopic(e.topic("public.small"))), e.tableState("small", "id"))
	if got := e.topicConfig(e.topic("public.big_rows"), "max.message.bytes"); got != fmt.Sprint(sink.MaxRecordBytes) {
		t.Errorf("max.message.bytes of the data topic = %q, want %d", got, sink.MaxRecordBytes)
	}
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// TestOversizedRowFailsItsExportOnly: a row whose record exceeds sink.MaxRecordBytes cannot be
// published. The contract (DESIGN.md, Errors): that export stops alone with a failed watermark
// record saying why; the other exports keep flowing; the service does not crash-loop.
func TestOversizedRowFailsItsExportOnly(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE huge (id int PRIMARY KEY, t text, b bytea)`,
		`CREATE TABLE small (id int PRIMARY KEY, v text)`,
		`INSERT INTO huge (id, t) VALUES (1, 'fine')`,
		`INSERT INTO small VALUES (1, 'one')`,
	)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.huge,public.small"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, 1, "public.huge", "public.small")

	// About 20 MiB of JSON: over the limit.
	beforeHuge := e.insertLSN(ctx)
	e.exec(bigRowSQL("huge", 2, 20, 0))
	afterHuge := e.insertLSN(ctx)
	e.exec(`INSERT INTO small VALUES (2, 'two')`)
	lsn := e.insertLSN(ctx)
	t.Logf("oversized transaction between %s and %s; small's insert ends before %s", beforeHuge, afterHuge, lsn)

	w, err := wait.New(e.brokers, e.watermarkTopic())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	hugeID := change.ExportID{Schema: "public", Table: "huge"}
	smallID := change.ExportID{Schema: "public", Table: "small"}
	deadline := time.Now().Add(60 * time.Second)
	var failed *watermark.Record
	smallPassed, violated, slotPassed := false, false, false
	slotConn := e.conn()
	for time.Now().Before(deadline) && (failed == nil || !smallPassed) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = w.Poll(pctx)
		cancel()
		latest := w.Latest()
		if r, ok := latest[hugeID]; ok && r.State == watermark.StateFailed {
			failed = &r
		} else if ok && r.Watermark != nil && *r.Watermark >= afterHuge && !violated {
			// The oversized row is not in the topic, so no watermark may claim to cover it.
			violated = true
			t.Errorf("%v is %s with watermark %s, past the end of its unpublished oversized transaction (%s)", hugeID, r.State, *r.Watermark, afterHuge)
		}
		if c := e.slotConfirmed(ctx, slotConn); c >= afterHuge && !slotPassed {
			slotPassed = true
			t.Logf("the slot is confirmed at %s, past the oversized transaction (%s); only fine once %v has failed (failed record seen: %v)", c, afterHuge, hugeID, failed != nil)
		}
		if r, ok := latest[smallID]; ok && r.Watermark != nil && *r.Watermark >= lsn {
			smallPassed = true
		}
		if done, perr := p.exited(); done {
			t.Fatalf("cdc exited (%v) after an oversized row; want only that export to fail", perr)
		}
	}
	if restarts := strings.Count(p.log.String(), "pipeline failed; restarting"); restarts > 0 {
		t.Errorf("the pipeline restarted %d times after an oversized row (crash loop); want the export to fail alone", restarts)
	}
	if failed == nil {
		t.Fatalf("no failed watermark record for %v within 60s; latest: %+v", hugeID, w.Latest()[hugeID])
	}
	if !strings.Contains(strings.ToLower(failed.Error), "large") && !strings.Contains(failed.Error, "bytes") {
		t.Errorf("failed record of %v says %q; want the reason (record too large, its size and the limit)", hugeID, failed.Error)
	}
	if !smallPassed {
		t.Errorf("the watermark of %v did not pass %s while %v had failed", smallID, lsn, hugeID)
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

// TestKeylessTableInCDCTablesRefused: CDC_TABLES naming a table without primary key or replica
// identity is refused at start-up with a message that says how to fix it, before anything is
// created.
func TestKeylessTableInCDCTablesRefused(t *testing.T) {
	e := newEnv(t)
	e.exec(`CREATE TABLE nokey (a int, b text)`, `CREATE TABLE fine (id int PRIMARY KEY)`)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.fine,public.nokey"
	start := time.Now()
	p := e.startCDC(vars)
	code := waitExit(t, p, 30*time.Second)
	out := p.log.String()
	t.Logf("exit %d after %s:\n%s", code, time.Since(start).Round(time.Millisecond), tail(out, 2000))
	if code == 0 {
		t.Errorf("exit code 0, want non-zero")
	}
	for _, want := range []string{"nokey", "REPLICA IDENTITY", "primary key"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not mention %q", want)
		}
	}
	var pubs, slots int
	c := e.conn()
	if err := c.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM pg_publication), (SELECT count(*) FROM pg_replication_slots WHERE database = current_database())`).Scan(&pubs, &slots); err != nil {
		t.Fatal(err)
	}
	if pubs != 0 || slots != 0 {
		t.Errorf("after the refusal: %d publications and %d slots exist, want none", pubs, slots)
	}
	for _, topic := range e.listTopics(e.prefix + ".") {
		t.Errorf("after the refusal: topic %s exists", topic)
	}
	var ident string
	if err := c.QueryRow(t.Context(), `SELECT relreplident::text FROM pg_class WHERE relname = 'nokey'`).Scan(&ident); err != nil || ident != "d" {
		t.Errorf("replica identity of nokey = %q (%v); the service must not change it", ident, err)
	}
}

// waitExit waits for cdc to exit by itself and returns its exit code.
func waitExit(t testing.TB, p *proc, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		p.done <- nil
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("cdc still running after %s; log:\n%s", timeout, tail(p.log.String(), 4000))
		return -1
	}
}

// TestKeylessTableInUserPublication: a table with REPLICA IDENTITY FULL and no primary key, in a
// publication the user manages, streams with null keys to a topic that is not compacted, with
// full before images and no tombstones.
func TestKeylessTableInUserPublication(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE keyless (a int, b text)`,
		`ALTER TABLE keyless REPLICA IDENTITY FULL`,
		`INSERT INTO keyless VALUES (1, 'one'), (2, 'two'), (2, 'two')`,
		`CREATE PUBLICATION `+e.pub+` FOR TABLE keyless`,
	)
	vars := e.baseVars()
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, 1, "public.keyless")
	e.exec(
		`UPDATE keyless SET b = 'uno' WHERE a = 1`,
		`DELETE FROM keyless WHERE a = 2`,
		`INSERT INTO keyless VALUES (3, NULL)`,
	)
	lsn := e.insertLSN(ctx)
	e.waitFor(p, 2*time.Minute, lsn, "public.keyless")

	topic := e.topic("public.keyless")
	if policy := e.topicConfig(topic, "cleanup.policy"); strings.Contains(policy, "compact") {
		t.Errorf("topic %s of a keyless table has cleanup.policy=%s", topic, policy)
	}
	recs := e.readTopic(topic)
	var got []string
	for _, r := range recs {
		if r.Key != nil {
			t.Errorf("record at offset %d has key %q, want null", r.Offset, r.Key)
		}
		if r.Value == nil {
			t.Errorf("tombstone at offset %d for a keyless table", r.Offset)
			continue
		}
		var v struct {
			Before json.RawMessage `json:"before"`
			After  json.RawMessage `json:"after"`
			Op     string          `json:"op"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s -> %s", v.Op, v.Before, v.After))
	}
	// Snapshot rows arrive in heap order; the changes in commit order.
	want := []string{
		`r null -> {"a":1,"b":"one"}`,
		`r null -> {"a":2,"b":"two"}`,
		`r null -> {"a":2,"b":"two"}`,
		`u {"a":1,"b":"one"} -> {"a":1,"b":"uno"}`,
		`d {"a":2,"b":"two"} -> null`,
		`d {"a":2,"b":"two"} -> null`,
		`c null -> {"a":3,"b":null}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
