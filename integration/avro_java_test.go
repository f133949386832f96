package integration

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
)

// javaLine is one record as TidemarkAvroReader (scripts/avro-reader) prints it: the images'
// columns as PostgreSQL text the JVM made from the Avro values alone.
type javaLine struct {
	Partition     int32              `json:"partition"`
	Offset        int64              `json:"offset"`
	KeySchemaID   *int               `json:"keySchemaId"`
	ValueSchemaID *int               `json:"valueSchemaId"`
	Key           map[string]*string `json:"key"`
	Tombstone     bool               `json:"tombstone"`
	Op            string             `json:"op"`
	After         map[string]*string `json:"after"`
	Unchanged     string             `json:"unchanged"` // the header tidemark.unchanged
}

// debeziumMicros is io.debezium.time.MicroDuration of interval x, computed by PostgreSQL:
// months of 365.25/12 days, days of 24 hours.
const debeziumMicros = `((extract(year from %[1]s) * 12 + extract(month from %[1]s)) * 30.4375 + extract(day from %[1]s)) * 86400000000
	+ extract(hour from %[1]s) * 3600000000 + extract(minute from %[1]s) * 60000000 + extract(microseconds from %[1]s)`

// javaCompare returns the SQL that compares column col of type typ with the JVM's text in
// parameter p: both sides as PostgreSQL's text of the value, except where the Avro mapping
// changes the form (timetz in UTC, interval as Debezium's microseconds, arrays flattened, json
// without surrounding whitespace, xml through its output function as pgoutput sends it).
func javaCompare(col, typ, p string) string {
	elem, isArray := strings.CutSuffix(typ, "[]")
	side := func(x string, isParam bool) string {
		switch {
		case typ == "xml": // xml's output, which drops a plain <?xml version="1.0"?> as pgoutput sends it
			return fmt.Sprintf("textin(xml_out(%s))", x)
		case typ == "json": // surrounding whitespace trimmed, as docs/value-mapping.md says
			return fmt.Sprintf("btrim((%s)::text, E' \t\n\r')", x)
		case typ == "timetz":
			return fmt.Sprintf("((%s) AT TIME ZONE 'UTC')::text", x)
		case typ == "interval" && isParam:
			return x + "::numeric"
		case typ == "interval":
			return fmt.Sprintf(debeziumMicros, x)
		case !isArray:
			return fmt.Sprintf("(%s)::text", x)
		}
		e := "e::text"
		switch elem {
		case "json":
			e = "btrim(e::text, E' \t\n\r')"
		case "timetz":
			e = "(e AT TIME ZONE 'UTC')::text"
		case "interval":
			e = "trim_scale(" + fmt.Sprintf(debeziumMicros, "e") + ")::text"
			if isParam {
				e = "trim_scale(e::numeric)::text"
			}
		}
		// Row-major order, whatever the dimensions and bounds (pkg/format/avro flattens).
		return fmt.Sprintf("CASE WHEN %[1]s IS NULL THEN NULL ELSE ARRAY(SELECT %[2]s FROM unnest(%[1]s) e) END", x, e)
	}
	paramType := typ
	if elem == "interval" && isArray {
		paramType = "numeric[]"
	}
	if typ == "interval" {
		paramType = "text"
	}
	param := p + "::text::" + paramType
	if strings.HasPrefix(typ, "reg") && !isArray {
		param = typ + "in(" + p + "::text::cstring)" // its input function: a cast from text reads no "-"
	}
	return fmt.Sprintf("(%s) IS NOT DISTINCT FROM (%s)", side(col, false), side(param, true))
}

// TestJavaConsumerReadsAvro: a JVM consumer outside Tidemark (scripts/avro-reader: a plain
// KafkaConsumer with Apicurio Registry's AvroKafkaDeserializer reading Confluent's 4-byte ids
// from the registry) reads the topic of a table with every type of the types test (the values
// Avro can carry), snapshot and stream, updates, deletes and tombstones included. Every record
// decodes, with the schema id the topic's bytes carry; the last image of each key, each column
// turned into PostgreSQL text by the JVM from the Avro schema alone, equals the table's row as
// PostgreSQL compares it (javaCompare: by text, timetz in UTC, interval as Debezium's
// microseconds, arrays flattened).
func TestJavaConsumerReadsAvro(t *testing.T) {
	regURL := testenv.Registry(t)
	e := newEnv(t)
	ctx := t.Context()
	typesSetup(e)
	cases, rows, rowSQL := avroTypeCases()
	avroTypesTable(e, cases, rows, rowSQL)

	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.avro_types"
	vars["CDC_VALUE_FORMAT"] = "avro"
	vars["CDC_SCHEMA_REGISTRY_URL"] = regURL
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, 1, "public.avro_types")
	var stmts []string
	for row := 1; row <= rows; row++ {
		stmts = append(stmts, "INSERT INTO avro_types VALUES "+rowSQL(row, row+replicaOffset))
	}
	stmts = append(stmts,
		fmt.Sprintf("UPDATE avro_types SET %s = %s, %s = %s WHERE id IN (2, %d)", typeColumn("int4"), typeColumn("int4")+" + 1",
			typeColumn("text"), "'updated'", 3+replicaOffset),
		fmt.Sprintf("DELETE FROM avro_types WHERE id IN (1, %d)", 4+replicaOffset))
	e.exec(stmts...)
	e.waitFor(p, 2*time.Minute, e.insertLSN(ctx), "public.avro_types")

	topic := e.topic("public.avro_types")
	recs := e.readTopic(topic)
	out := testenv.ReadAvroWithJava(t, e.brokers, topic, regURL)
	lines := parseJavaLines(t, out)
	if len(lines) != len(recs) {
		t.Fatalf("the JVM read %d records, the topic holds %d", len(lines), len(recs))
	}
	state, ops, merged := javaState(t, lines, recs)
	t.Logf("the JVM read %d records (ops %v) into %d rows, %d unchanged TOASTed values merged", len(lines), ops, len(state), merged)
	if ops["r"] != rows || ops["c"] != rows || ops["u"] != 2 || ops["d"] != 2 {
		t.Errorf("ops %v: want %d r and c, 2 u and 2 d", ops, rows)
	}
	compareJavaRows(t, e, cases, state)
}

// javaState checks each line against the record Go read at the same place (partition, offset,
// schema ids) and rebuilds the rows the topic ends with, merging unchanged TOASTed columns from
// the row's previous image; it returns them with the count of each op and of merged values.
func javaState(t *testing.T, lines []javaLine, recs []*kgo.Record) (map[string]map[string]*string, map[string]int, int) {
	t.Helper()
	state := map[string]map[string]*string{}
	ops := map[string]int{}
	merged := 0
	for i, l := range lines {
		r := recs[i]
		if l.Partition != r.Partition || l.Offset != r.Offset {
			t.Fatalf("record %d: the JVM read partition %d offset %d, Go %d@%d", i, l.Partition, l.Offset, r.Partition, r.Offset)
		}
		checkJavaID(t, "key", l.KeySchemaID, r.Key)
		if l.Tombstone {
			continue
		}
		checkJavaID(t, "value", l.ValueSchemaID, r.Value)
		ops[l.Op]++
		id := *l.Key["id"]
		if l.Op == "d" {
			delete(state, id)
			continue
		}
		if l.Unchanged != "" { // unchanged TOASTed columns: the row's previous values
			var cols []string
			if err := json.Unmarshal([]byte(l.Unchanged), &cols); err != nil || state[id] == nil {
				t.Fatalf("offset %d: unchanged %s (%v) without a previous image of %s", l.Offset, l.Unchanged, err, id)
			}
			for _, c := range cols {
				l.After[c] = state[id][c]
			}
			merged += len(cols)
		}
		state[id] = l.After
	}
	return state, ops, merged
}

func parseJavaLines(t testing.TB, out []byte) []javaLine {
	t.Helper()
	var lines []javaLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l javaLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("TidemarkAvroReader printed %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// checkJavaID: the schema id the JVM decoded with is the one in the record's bytes.
func checkJavaID(t testing.TB, what string, got *int, b []byte) {
	t.Helper()
	if len(b) < 5 || got == nil || *got != int(binary.BigEndian.Uint32(b[1:5])) {
		t.Fatalf("%s: the JVM's schema id %v, the record's bytes % x", what, got, b[:min(5, len(b))])
	}
}

// compareJavaRows compares every row the JVM rebuilt with the table, column by column, in
// PostgreSQL.
func compareJavaRows(t *testing.T, e *env, cases []typeCase, state map[string]map[string]*string) {
	t.Helper()
	ctx := t.Context()
	conn := e.conn()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM avro_types").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(state) {
		t.Errorf("the JVM rebuilt %d rows, the table has %d", len(state), n)
	}
	var cmps []string
	for i, c := range cases {
		cmps = append(cmps, javaCompare(typeColumn(c.sqlType), c.sqlType, fmt.Sprintf("$%d", i+2)))
	}
	query := "SELECT ARRAY[" + strings.Join(cmps, ", ") + "] FROM avro_types WHERE id = $1::text::int"
	compared := 0
	for id, img := range state {
		args := []any{id}
		for _, c := range cases {
			v, ok := img[typeColumn(c.sqlType)]
			if !ok {
				t.Fatalf("row %s has no column %s", id, typeColumn(c.sqlType))
			}
			if v == nil {
				args = append(args, nil)
			} else {
				args = append(args, *v)
			}
		}
		var same []bool
		if err := conn.QueryRow(ctx, query, args...).Scan(&same); err != nil {
			t.Fatalf("row %s: %v", id, err)
		}
		for i, ok := range same {
			if !ok {
				t.Errorf("row %s, %s: the JVM read %v; the table differs", id, cases[i].sqlType, deref(args[i+1]))
			}
			compared++
		}
	}
	t.Logf("%d values of %d columns compared in PostgreSQL", compared, len(cases))
}

func deref(v any) any {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return v
}
