package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	tmavro "github.com/tidemark/cdc/pkg/format/avro"
	"github.com/tidemark/cdc/pkg/schemareg"
	"github.com/tidemark/cdc/pkg/wait"
	"github.com/tidemark/cdc/pkg/watermark"
)

// avroColumn is one column of the Avro types table: its type, the expression of generate_series
// g that fills it, and how a value read back is compared with the table's (cmp, with %s for
// either side; "%s" compares the values themselves).
type avroColumn struct {
	name, typ, value, cmp string
	col                   format.Column
}

var avroColumns = []avroColumn{
	{name: "i2", typ: "int2", value: "(g-10)::int2"},
	{name: "i8", typ: "int8", value: "g::int8*9007199254740"},
	{name: "o", typ: "oid", value: "g"},
	{name: "f4", typ: "float4", value: "g*1.5"},
	{name: "f8", typ: "float8", value: "CASE g WHEN 2 THEN -1e100 WHEN 5 THEN 'NaN' WHEN 6 THEN '-Infinity' ELSE g/3.0 END"},
	{name: "n", typ: "numeric", value: "CASE WHEN g=4 THEN 123456789012345678901234567890.123456789 ELSE g*1.25-7 END"},
	{name: "n_scaled", typ: "numeric(12,4)", value: "g*1.0001"},
	{name: "m", typ: "money", value: "(g*1.23)::numeric::money"},
	{name: "b", typ: "bool", value: "g%2=0"},
	{name: "t", typ: "text", value: `E'text \t"q" é ' || g`},
	{name: "vc", typ: "varchar(20)", value: "'vc' || g"},
	{name: "ch", typ: "char(8)", value: "'ch' || g"},
	{name: "by", typ: "bytea", value: "decode(md5(g::text), 'hex')", col: format.Column{IsBytea: true}},
	{name: "u", typ: "uuid", value: "md5(g::text)::uuid"},
	{name: "j", typ: "json", value: `('{"g": ' || g || '}')::json`, cmp: "(%s)::text", col: format.Column{IsJSON: true}},
	{name: "jb", typ: "jsonb", value: "jsonb_build_object('g', g, 'a', ARRAY[g, g+1])", col: format.Column{IsJSON: true}},
	{name: "b1", typ: "bit(1)", value: "(g%2)::bit(1)"},
	{name: "b10", typ: "bit(10)", value: "g::bit(10)"},
	{name: "vb", typ: "varbit", value: "g::bit(10)::varbit", cmp: "ltrim((%s)::text, '0')"}, // Debezium's Bits keep no leading zeros
	{name: "ip", typ: "inet", value: "('10.0.0.' || g)::inet"},
	{name: "d", typ: "date", value: "CASE g WHEN 1 THEN 'infinity' WHEN 2 THEN '0044-03-15 BC' ELSE DATE '2024-01-01' + g END"},
	{name: "tm", typ: "time", value: "TIME '12:00' + g * interval '1.5 s'"},
	{name: "t3", typ: "time(3)", value: "TIME '23:59:59.999' - g * interval '1 ms'"},
	{name: "ttz", typ: "timetz", value: "('01:02:03.5+0' || (g%10) || ':30')::timetz", cmp: "(%s) AT TIME ZONE 'UTC'"},
	{name: "ts", typ: "timestamp", value: "CASE g WHEN 1 THEN 'infinity' WHEN 2 THEN '-infinity' WHEN 3 THEN '0044-03-15 12:00:00 BC' ELSE TIMESTAMP '2024-01-01' + g * interval '1 day 1.000001 s' END"},
	{name: "ts3", typ: "timestamp(3)", value: "TIMESTAMP '1969-12-31 23:59:59.999' + g * interval '1 ms'"},
	{name: "tstz", typ: "timestamptz", value: "CASE g WHEN 1 THEN 'infinity' WHEN 2 THEN '-infinity' WHEN 3 THEN '0044-03-15 12:00:00.5+00 BC' WHEN 4 THEN '0001-01-01 00:00:00+00 BC' ELSE TIMESTAMPTZ '2024-01-01 00:00:00+05' + g * interval '1 h 0.25 s' END"},
	{name: "iv", typ: "interval", value: "make_interval(days => g*3, secs => g * 1.000001)", cmp: "justify_hours(%s)"}, // MicroDuration: days as 24 h
	{name: "pt", typ: "point", value: "point(g, -g)", cmp: "(%s)::text"},
	{name: "mood", typ: "mood", value: "(ARRAY['sad','ok','happy'])[g%3+1]::mood"},
	{name: "pi", typ: "posint", value: "g"},
	{name: "ia", typ: "int4[]", value: "ARRAY[g, NULL, g+1]", col: format.Column{Elem: &format.Column{}}},
	{name: "ta", typ: "text[]", value: `ARRAY['a', NULL, 'x"y,' || g]`, col: format.Column{Elem: &format.Column{}}},
	{name: "na", typ: "numeric(6,1)[]", value: "ARRAY[g*1.5, NULL]::numeric(6,1)[]", col: format.Column{Elem: &format.Column{}}},
	{name: "da", typ: "date[]", value: "ARRAY[DATE '2024-01-01' + g, NULL]", col: format.Column{Elem: &format.Column{}}},
	{name: "Odd Col", typ: "text", value: "'odd ' || g"},
}

// TestAvroWithRegistry runs cdc with CDC_VALUE_FORMAT=avro against a real Apicurio Registry on
// a table of many types, through a snapshot, a streamed workload (inserts, updates, deletes, a
// key change, a truncate-free run) and an added column: every record's key and value carry an
// id the registry holds under the topic's subjects, decode with the registry's schema (and
// twmb/avro encodes the decoded value to the same bytes), and the rows read back are the
// table's rows, compared by PostgreSQL itself. tidemark-apply, reading the same records through
// the registry, keeps a replica equal to the table.
func TestAvroWithRegistry(t *testing.T) {
	regURL := testenv.Registry(t)
	e := newEnv(t)
	var cols, vals []string
	for _, c := range avroColumns {
		cols = append(cols, fmt.Sprintf("%q %s", c.name, c.typ))
		vals = append(vals, c.value)
	}
	types := []string{`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`, `CREATE DOMAIN posint AS int4 CHECK (VALUE > 0)`}
	replica := testenv.NewDB(t)
	testenv.Exec(t, replica, append(types, "CREATE TABLE a_types (id int PRIMARY KEY, "+strings.Join(cols, ", ")+", extra int4)")...)
	e.exec(types[0], types[1],
		"CREATE TABLE a_types (id int PRIMARY KEY, "+strings.Join(cols, ", ")+")",
		fmt.Sprintf("INSERT INTO a_types SELECT g, %s FROM generate_series(1, 20) g", strings.Join(vals, ", ")),
		"INSERT INTO a_types (id) VALUES (100)", // every other column SQL NULL
		"CREATE PUBLICATION "+e.pub+" FOR TABLE a_types")

	vars := e.baseVars()
	vars["CDC_VALUE_FORMAT"] = "avro"
	vars["CDC_SCHEMA_REGISTRY_URL"] = regURL
	p := e.startCDC(vars)
	applyVars := e.applyVars(replica, "public.a_types")
	applyVars["CDC_SCHEMA_REGISTRY_URL"] = regURL
	a := e.startBinary(applyBinary, applyVars)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.a_types")

	quoted := make([]string, len(avroColumns))
	for i, c := range avroColumns {
		quoted[i] = fmt.Sprintf("%q", c.name)
	}
	e.exec(
		fmt.Sprintf("INSERT INTO a_types SELECT id + 1000, %s FROM a_types WHERE id <= 20", strings.Join(quoted, ", ")),
		`UPDATE a_types SET i8 = i8 + 1, n = n * 2, ta = ta || 'more'::text WHERE id % 3 = 0`,
		`UPDATE a_types SET id = id + 500 WHERE id <= 3`, // key changes: delete, tombstone, create
		`DELETE FROM a_types WHERE id % 4 = 0`,
		`ALTER TABLE a_types ADD COLUMN extra int4`,
		`INSERT INTO a_types (id, extra) VALUES (2000, 7)`,
		`UPDATE a_types SET extra = id WHERE id BETWEEN 1000 AND 1005`,
	)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.a_types")

	topic := e.topic("public.a_types")
	recs := e.readTopic(topic)
	rc, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	keySub, valueSub, truncSub := tmavro.Subjects(topic)
	registered := map[string]map[int]bool{}
	for _, sub := range []string{keySub, valueSub, truncSub} {
		registered[sub] = map[int]bool{}
		ss, err := rc.Schemas(ctx, sub)
		if err != nil && sub != truncSub {
			t.Fatalf("versions of subject %s: %v", sub, err)
		}
		for _, s := range ss {
			registered[sub][s.ID] = true
		}
	}
	if n := len(registered[valueSub]); n != 2 {
		t.Errorf("subject %s has %d versions, want 2 (the table's two shapes)", valueSub, n)
	}

	cl, err := schemareg.New(schemareg.Config{URL: regURL})
	if err != nil {
		t.Fatal(err)
	}
	dec := tmavro.NewDecoder(cl)
	parsed := map[int]*avro.Schema{}
	// check decodes b with the registry's schema of its id, which must be one of subjects'.
	check := func(r *kgo.Record, b []byte, subjects ...string) {
		t.Helper()
		if len(b) < 5 || b[0] != 0 {
			t.Fatalf("%s@%d: not Confluent's wire format: % x", r.Topic, r.Offset, b[:min(5, len(b))])
		}
		id := int(binary.BigEndian.Uint32(b[1:5]))
		found := false
		for _, s := range subjects {
			found = found || registered[s][id]
		}
		if !found {
			t.Fatalf("%s@%d: schema id %d is not one the registry holds under %v", r.Topic, r.Offset, id, subjects)
		}
		s := parsed[id]
		if s == nil {
			rs, err := rc.SchemaByID(ctx, id)
			if err != nil {
				t.Fatalf("schema id %d: %v", id, err)
			}
			if s, err = avro.Parse(rs.Schema); err != nil {
				t.Fatalf("schema id %d does not parse: %v", id, err)
			}
			parsed[id] = s
		}
		var v any
		rest, err := s.Decode(b[5:], &v)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%s@%d: decode with schema %d: %v (%d bytes left)", r.Topic, r.Offset, id, err, len(rest))
		}
		again, err := s.Encode(v)
		if err != nil || !bytes.Equal(again, b[5:]) {
			t.Fatalf("%s@%d: twmb/avro encodes the decoded value to other bytes (%v)", r.Topic, r.Offset, err)
		}
	}

	// The table as the topic says it is: the last image of each key.
	state := map[string][]byte{}
	ops := map[change.Op]int{}
	for _, r := range recs {
		check(r, r.Key, keySub, truncSub)
		if r.Value == nil {
			continue // tombstone
		}
		check(r, r.Value, valueSub)
		var rec format.Record
		if err := dec.Decode(&rec, r.Key, r.Value); err != nil {
			t.Fatalf("%s@%d: %v", r.Topic, r.Offset, err)
		}
		ops[rec.Op]++
		if rec.Op == change.OpDelete {
			delete(state, string(rec.Key))
			continue
		}
		state[string(rec.Key)] = rec.After
	}
	t.Logf("%d records (r %d, c %d, u %d, d %d) with %d value and %d key schema ids", len(recs), ops[change.OpRead], ops[change.OpCreate],
		ops[change.OpUpdate], ops[change.OpDelete], len(registered[valueSub]), len(registered[keySub]))
	if ops[change.OpRead] != 21 || ops[change.OpDelete] == 0 || ops[change.OpUpdate] == 0 || ops[change.OpCreate] == 0 {
		t.Errorf("ops %v: want 21 snapshot reads and creates, updates and deletes", ops)
	}

	// Compared by PostgreSQL: each column's value read back, cast to its type, against the row.
	conn := e.conn()
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM a_types").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(state) {
		t.Errorf("the topic holds %d rows, the table %d", len(state), rows)
	}
	all := append([]avroColumn{{name: "id", typ: "int"}}, avroColumns...)
	all = append(all, avroColumn{name: "extra", typ: "int4"})
	var cmps []string
	for i, c := range all {
		cmp := c.cmp
		if cmp == "" {
			cmp = "%s"
		}
		cmps = append(cmps, fmt.Sprintf("(%s) IS NOT DISTINCT FROM (%s)",
			fmt.Sprintf(cmp, fmt.Sprintf("%q", c.name)), fmt.Sprintf(cmp, fmt.Sprintf("$%d::text::%s", i+1, c.typ))))
	}
	query := "SELECT ARRAY[" + strings.Join(cmps, ", ") + "] FROM a_types WHERE id = $1::text::int"
	for key, img := range state {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(img, &fields); err != nil {
			t.Fatalf("image of %s: %v", key, err)
		}
		args := make([]any, len(all))
		for i, c := range all {
			raw, ok := fields[c.name]
			if !ok && c.name != "extra" {
				t.Errorf("image of %s has no %q: %s", key, c.name, img)
				continue
			}
			text, notNull, err := dec.AppendText(nil, raw, &c.col)
			if err != nil {
				t.Fatalf("image of %s, %s: %v", key, c.name, err)
			}
			if notNull {
				args[i] = string(text)
			}
		}
		var same []bool
		if err := conn.QueryRow(ctx, query, args...).Scan(&same); err != nil {
			t.Fatalf("row %s: %v (image %s)", key, err, img)
		}
		for i, ok := range same {
			if !ok {
				t.Errorf("row %s, column %q: read back %v, the table differs", key, all[i].name, args[i])
			}
		}
	}
	if done, err := p.exited(); done {
		t.Fatalf("cdc exited: %v", err)
	}

	// The replica tidemark-apply keeps, row by row, compared as above.
	var norm []string
	for _, c := range all {
		cmp := c.cmp
		if cmp == "" {
			cmp = "%s"
		}
		norm = append(norm, fmt.Sprintf(cmp, fmt.Sprintf("%q", c.name)))
	}
	rowsQuery := "SELECT id::text, ROW(" + strings.Join(norm, ", ") + ")::text FROM a_types"
	read := func(url string) map[string]string {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		rs, err := c.Query(ctx, rowsQuery)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for rs.Next() {
			var id, row string
			if err := rs.Scan(&id, &row); err != nil {
				t.Fatal(err)
			}
			out[id] = row
		}
		return out
	}
	var diffs []string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		src, dst := read(e.pgURL), read(replica)
		diffs = diffs[:0]
		for id, row := range src {
			if dst[id] != row {
				diffs = append(diffs, fmt.Sprintf("id %s: source %s, replica %s", id, row, dst[id]))
			}
		}
		if len(dst) != len(src) {
			diffs = append(diffs, fmt.Sprintf("%d rows in the source, %d in the replica", len(src), len(dst)))
		}
		if len(diffs) == 0 || time.Now().After(deadline) {
			t.Logf("tidemark-apply's replica: %d rows of %d", len(dst), len(src))
			break
		}
	}
	for _, d := range diffs {
		t.Error(d)
	}
	if done, err := a.exited(); done {
		t.Errorf("tidemark-apply exited: %v", err)
	}
}

// TestAvroRefusedSchemaFailsItsExportOnly: a column retyped in a way the subject's BACKWARD
// level refuses stops that table's export alone, with a failed watermark record that names the
// subject and the fix; the other table goes on, and cdc does not restart.
func TestAvroRefusedSchemaFailsItsExportOnly(t *testing.T) {
	regURL := testenv.Registry(t)
	e := newEnv(t)
	ctx := t.Context()
	e.exec(`CREATE TABLE retyped (id int PRIMARY KEY, v text)`, `CREATE TABLE steady (id int PRIMARY KEY, v text)`,
		`INSERT INTO retyped VALUES (1, 'one')`, `INSERT INTO steady VALUES (1, 'one')`)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.retyped,public.steady"
	vars["CDC_VALUE_FORMAT"] = "avro"
	vars["CDC_SCHEMA_REGISTRY_URL"] = regURL
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.retyped", "public.steady")

	rc, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	_, valueSub, _ := tmavro.Subjects(e.topic("public.retyped"))
	if res := rc.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatBackward}, valueSub); res[0].Err != nil {
		t.Fatalf("set %s to BACKWARD: %v", valueSub, res[0].Err)
	}
	e.exec(`ALTER TABLE retyped ALTER COLUMN v TYPE int USING length(v)`, `INSERT INTO retyped VALUES (2, 2)`,
		`INSERT INTO steady VALUES (2, 'two')`)
	lsn := e.currentLSN(ctx)

	w, err := wait.New(e.brokers, e.watermarkTopic())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	retypedID := change.ExportID{Schema: "public", Table: "retyped"}
	steadyID := change.ExportID{Schema: "public", Table: "steady"}
	var failed *watermark.Record
	steadyPassed := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && (failed == nil || !steadyPassed); {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = w.Poll(pctx)
		cancel()
		latest := w.Latest()
		if r, ok := latest[retypedID]; ok && r.State == watermark.StateFailed {
			failed = &r
		}
		if r, ok := latest[steadyID]; ok && r.Watermark != nil && *r.Watermark >= lsn {
			steadyPassed = true
		}
		if done, perr := p.exited(); done {
			t.Fatalf("cdc exited (%v) after a refused schema; want only that export to fail", perr)
		}
	}
	if failed == nil {
		t.Fatalf("no failed watermark record for %v within 60s; latest: %+v", retypedID, w.Latest()[retypedID])
	}
	for _, want := range []string{valueSub, "BACKWARD", "fix:"} {
		if !strings.Contains(failed.Error, want) {
			t.Errorf("failed record of %v says %q; want it to name %q", retypedID, failed.Error, want)
		}
	}
	if !steadyPassed {
		t.Errorf("the watermark of %v did not pass %s while %v had failed", steadyID, lsn, retypedID)
	}
	if restarts := strings.Count(p.log.String(), "pipeline failed; restarting"); restarts > 0 {
		t.Errorf("the pipeline restarted %d times after a refused schema; want the export to fail alone", restarts)
	}
	for _, r := range e.readTopic(e.topic("public.retyped")) {
		if len(r.Key) == 6 && r.Key[5] == 4 { // id 2: zig-zag 4
			t.Errorf("the row of the refused shape reached the topic: % x", r.Value)
		}
	}
}
