package integration

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/format"
	tmavro "github.com/tidemark/cdc/pkg/format/avro"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// avroRepresentable reports whether a value of the types table has an Avro encoding: not a
// numeric NaN or infinity (decimal has none), not a timestamp or interval beyond int64
// microseconds. The others fail their table, as pkg/format/avro documents.
func avroRepresentable(sqlType, lit string) bool {
	switch sqlType {
	case "numeric", "numeric[]":
		return !strings.Contains(lit, "NaN") && !strings.Contains(lit, "Infinity")
	case "timestamp", "timestamptz":
		return !strings.Contains(lit, "294276")
	case "interval":
		return !strings.Contains(lit, "178000000") && !strings.Contains(lit, "-2147483648 days")
	}
	return true
}

// avroTypeCases returns the types test's cases with the values Avro can carry, the number of
// rows of their table (the last all NULL), and the VALUES tuple of a row under an id.
func avroTypeCases() ([]typeCase, int, func(row, id int) string) {
	cases := make([]typeCase, len(typeCases))
	rows := 0
	for i, c := range typeCases {
		cases[i].sqlType = c.sqlType
		for _, v := range c.values {
			if avroRepresentable(c.sqlType, v) {
				cases[i].values = append(cases[i].values, v)
			}
		}
		rows = max(rows, len(cases[i].values))
	}
	rows++ // a row of NULLs
	rowSQL := func(row, id int) string {
		vals := []string{fmt.Sprint(id)}
		for _, c := range cases {
			v := "NULL"
			if row <= len(c.values) {
				v = c.values[row-1]
			}
			vals = append(vals, v)
		}
		return "(" + strings.Join(vals, ", ") + ")"
	}
	return cases, rows, rowSQL
}

// avroTypesTable creates the table avro_types of cases (after typesSetup) with its rows.
func avroTypesTable(e *env, cases []typeCase, rows int, rowSQL func(row, id int) string) {
	var cols []string
	for _, c := range cases {
		cols = append(cols, typeColumn(c.sqlType)+" "+c.sqlType)
	}
	e.exec(fmt.Sprintf("CREATE TABLE avro_types (id int PRIMARY KEY, %s)", strings.Join(cols, ", ")))
	for row := 1; row <= rows; row++ {
		e.exec("INSERT INTO avro_types VALUES " + rowSQL(row, row))
	}
}

// TestAvroTypes: every type of the types test (typeCases), with its edge values that Avro can
// carry, read by the snapshot (op r) and arriving through replication (op c) under other
// database defaults, in CDC_VALUE_FORMAT=avro with a real Apicurio Registry: every record decodes
// with the registry's schema of its id (twmb/avro re-encodes it to the same bytes), the two stages
// give identical rows, and testdata/types_avro.golden holds each value as pkg/format/avro's
// decoder reads it back (`type | SQL | read back`; rewrite with -update and review the diff).
func TestAvroTypes(t *testing.T) {
	regURL := testenv.Registry(t)
	e := newEnv(t)
	ctx := t.Context()
	typesSetup(e) // the user types (and the json test's own table, not published here)
	cases, rows, rowSQL := avroTypeCases()
	avroTypesTable(e, cases, rows, rowSQL)
	e.exec(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET DateStyle = ''SQL, DMY''', current_database());
		EXECUTE format('ALTER DATABASE %I SET TimeZone = ''Asia/Kolkata''', current_database());
		EXECUTE format('ALTER DATABASE %I SET IntervalStyle = ''iso_8601''', current_database());
		EXECUTE format('ALTER DATABASE %I SET bytea_output = ''escape''', current_database());
		EXECUTE format('ALTER DATABASE %I SET extra_float_digits = 0', current_database());
		EXECUTE format('ALTER DATABASE %I SET search_path = pg_catalog', current_database()); END $$`)

	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.avro_types"
	vars["CDC_VALUE_FORMAT"] = "avro"
	vars["CDC_SCHEMA_REGISTRY_URL"] = regURL
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, 1, "public.avro_types")
	stmts := []string{"SET DateStyle = ISO", "SET TimeZone = 'UTC'", "SET IntervalStyle = postgres", "SET search_path = public"}
	for row := 1; row <= rows; row++ {
		stmts = append(stmts, "INSERT INTO avro_types VALUES "+rowSQL(row, row+replicaOffset))
	}
	e.exec(stmts...)
	e.waitFor(p, 2*time.Minute, e.insertLSN(ctx), "public.avro_types")

	cl, err := schemareg.New(schemareg.Config{URL: regURL})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	dec := tmavro.NewDecoder(cl)
	parsed := map[int]*avro.Schema{}
	after := map[int]map[string]json.RawMessage{}
	ops := map[int]string{}
	for _, r := range e.readTopic(e.topic("public.avro_types")) {
		id := int(binary.BigEndian.Uint32(r.Value[1:5]))
		s := parsed[id]
		if s == nil {
			rs, err := rc.SchemaByID(ctx, id)
			if err != nil {
				t.Fatalf("schema id %d: %v", id, err)
			}
			if s, err = avro.Parse(rs.Schema); err != nil {
				t.Fatalf("schema id %d: %v", id, err)
			}
			parsed[id] = s
		}
		var v any
		if rest, err := s.Decode(r.Value[5:], &v); err != nil || len(rest) != 0 {
			t.Fatalf("offset %d: decode with schema %d: %v", r.Offset, id, err)
		}
		if again, err := s.Encode(v); err != nil || !bytes.Equal(again, r.Value[5:]) {
			t.Fatalf("offset %d: twmb/avro encodes the decoded value to other bytes (%v)", r.Offset, err)
		}
		var rec format.Record
		if err := dec.Decode(&rec, r.Key, r.Value); err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		var img map[string]json.RawMessage
		if err := json.Unmarshal(rec.After, &img); err != nil {
			t.Fatalf("offset %d: after %s: %v", r.Offset, rec.After, err)
		}
		var rowID int
		_ = json.Unmarshal(img["id"], &rowID)
		after[rowID], ops[rowID] = img, string(rec.Op)
	}
	if len(parsed) != 1 {
		t.Errorf("%d value schema ids for one table shape", len(parsed))
	}
	var golden bytes.Buffer
	for _, c := range cases {
		col := typeColumn(c.sqlType)
		for row := 1; row <= rows; row++ {
			snap, repl := after[row], after[row+replicaOffset]
			if snap == nil || repl == nil || ops[row] != "r" || ops[row+replicaOffset] != "c" {
				t.Fatalf("row %d: snapshot %v (op %s), replicated %v (op %s)", row, snap != nil, ops[row], repl != nil, ops[row+replicaOffset])
			}
			lit := "NULL"
			if row <= len(c.values) {
				lit = c.values[row-1]
			}
			if !bytes.Equal(snap[col], repl[col]) {
				t.Errorf("%s %s: snapshot and replication differ:\n snapshot    %s\n replication %s", c.sqlType, lit, snap[col], repl[col])
			}
			if row > len(c.values) && string(snap[col]) != "null" {
				t.Errorf("%s row %d: SQL NULL read back as %s", c.sqlType, row, snap[col])
			}
			if row <= len(c.values) || row == rows {
				fmt.Fprintf(&golden, "%s | %s | %s\n", c.sqlType, lit, goldenEscaper.Replace(string(snap[col])))
			}
		}
	}
	compareGolden(t, filepath.Join("testdata", "types_avro.golden"), golden.Bytes())
}
