package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// typeColumn is one column of the types table: its name, SQL type and one literal per row of
// typeRows (an empty literal means NULL).
type typeColumn struct {
	name, sqlType string
	values        [typeRows]string
}

// typeRows is how many rows the types table has; row typeRows (the last) is NULL in every column.
const typeRows = 5

// replicaOffset is added to the id of a snapshot row to get the id of its replicated copy.
const replicaOffset = 1000

// typeColumns covers every row of the codec's mapping table (pkg/codec/doc.go) with ordinary,
// edge and NULL values.
var typeColumns = []typeColumn{
	{"c_int2", "int2", [typeRows]string{"42", "-32768", "32767", "0"}},
	{"c_int4", "int4", [typeRows]string{"-7", "-2147483648", "2147483647", "0"}},
	{"c_int8", "int8", [typeRows]string{"9007199254740993", "-9223372036854775808", "9223372036854775807", "0"}},
	{"c_oid", "oid", [typeRows]string{"4294967295", "0", "1259", "16384"}},
	{"c_numeric", "numeric", [typeRows]string{"'1.50'", "'NaN'", "'123456789012345678901234567890.123456789012345678901234567890'", "'-0.000000000000000000000000000001'"}},
	{"c_numeric_scaled", "numeric(12,4)", [typeRows]string{"'1.5'", "'-99999999.9999'", "0", "'0.0001'"}},
	{"c_float4", "float4", [typeRows]string{"'1.5'", "'NaN'", "'-Infinity'", "'3.4028235e+38'"}},
	{"c_float8", "float8", [typeRows]string{"'0.1'", "'NaN'", "'Infinity'", "'-0'"}},
	{"c_float8_big", "float8", [typeRows]string{"'1e+100'", "'-Infinity'", "'2.2250738585072014e-308'", "'123456789.123456789'"}},
	{"c_bool", "bool", [typeRows]string{"true", "false", "true", "false"}},
	{"c_text", "text", [typeRows]string{`'plain'`, `E'quote " backslash \\ tab \t newline \n bell \x07 del \x7f'`, `''`, `'ünï€ode 𝄞 emoji 😀'`}},
	{"c_varchar", "varchar(20)", [typeRows]string{"'short'", "''", "'exactly twenty chars'", `'a"b\c'`}},
	{"c_char", "char(8)", [typeRows]string{"'ab'", "''", "'12345678'", "'ü'"}},
	{"c_name", "name", [typeRows]string{"'pg_class'", "'Mixed Case Name'", "''", "'ñ'"}},
	{"c_bytea", "bytea", [typeRows]string{`'\xdeadbeef'`, `'\x'`, `'\x00010203fffefd'`, `'\x5c22'`}},
	{"c_uuid", "uuid", [typeRows]string{"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'", "'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF'", "'{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a12}'"}},
	{"c_date", "date", [typeRows]string{"'2024-01-31'", "'infinity'", "'-infinity'", "'0044-03-15 BC'"}},
	{"c_time", "time", [typeRows]string{"'12:34:56.5'", "'00:00:00'", "'24:00:00'", "'23:59:59.999999'"}},
	{"c_timetz", "timetz", [typeRows]string{"'12:34:56.5+05:30'", "'00:00:00-12'", "'23:59:59.999999+14'", "'01:02:03Z'"}},
	{"c_timestamp", "timestamp", [typeRows]string{"'2024-01-31 12:34:56.123456'", "'infinity'", "'-infinity'", "'0044-03-15 12:00:00 BC'"}},
	{"c_timestamptz", "timestamptz", [typeRows]string{"'2024-01-31 12:34:56.123+02'", "'infinity'", "'-infinity'", "'0044-03-15 12:00:00+00 BC'"}},
	{"c_interval", "interval", [typeRows]string{"'1 year 2 mons -3 days 04:05:06.7'", "'0'", "'-178000000 years'", "'1 day -00:00:00.000001'"}},
	{"c_json", "json", [typeRows]string{`'  {"b": 1,  "a": [1, 2.50, "x\"y"]}  '`, `'null'`, `'"just a string"'`, `'[]'`}},
	{"c_jsonb", "jsonb", [typeRows]string{`'{"b": 1, "a": [1, 2.50, "x\"y"], "ü": null}'`, `'null'`, `'12345678901234567890.5'`, `'{}'`}},
	{"c_int4_arr", "int4[]", [typeRows]string{"'{1,2,3}'", "'{}'", "'{NULL,-1,NULL}'", "'[0:1]={7,8}'"}},
	{"c_int8_2d", "int8[][]", [typeRows]string{"'{{1,2},{3,4}}'", "'{{NULL,9223372036854775807}}'", "'{{{1},{2}},{{3},{4}}}'", "'{}'"}},
	{"c_text_arr", "text[]", [typeRows]string{`'{a,"b c","d,e"}'`, `ARRAY['quote "', 'back\slash', 'NULL', '', NULL, '{}']`, `'{{x,y},{"z w",NULL}}'`, `ARRAY['ünï', E'tab\there']`}},
	{"c_varchar_arr", "varchar(10)[]", [typeRows]string{`'{x,y}'`, `'{NULL}'`, `'{" lead"}'`, `'{}'`}},
	{"c_numeric_arr", "numeric[]", [typeRows]string{"'{1.50,NaN,-0.001}'", "'{NULL}'", "'{12345678901234567890.0987654321}'", "'{}'"}},
	{"c_float8_arr", "float8[]", [typeRows]string{"'{0.1,NaN,Infinity,-Infinity,-0,1e+100}'", "'{NULL,1.5}'", "'{}'", "'{{1,2},{3,4}}'"}},
	{"c_bool_arr", "bool[]", [typeRows]string{"'{t,f,NULL}'", "'{}'", "'{{t},{f}}'", "'{true}'"}},
	{"c_bytea_arr", "bytea[]", [typeRows]string{`ARRAY['\xdead'::bytea, '\x'::bytea, NULL]`, `'{}'`, `ARRAY['\x00'::bytea]`, `ARRAY['\x22'::bytea]`}},
	{"c_uuid_arr", "uuid[]", [typeRows]string{"'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}'", "'{}'", "'{00000000-0000-0000-0000-000000000000}'", "'{}'"}},
	{"c_date_arr", "date[]", [typeRows]string{"'{2024-01-31,infinity,NULL}'", `'{"0044-03-15 BC"}'`, "'{}'", "'{-infinity}'"}},
	{"c_timestamptz_arr", "timestamptz[]", [typeRows]string{`'{"2024-01-31 12:34:56.5+02",infinity,NULL}'`, `'{"0044-03-15 12:00:00+00 BC"}'`, "'{}'", "'{-infinity}'"}},
	{"c_interval_arr", "interval[]", [typeRows]string{`'{"1 day","-2 mons 00:00:01"}'`, "'{NULL}'", "'{}'", "'{0}'"}},
	{"c_jsonb_arr", "jsonb[]", [typeRows]string{`ARRAY['{"a":1}'::jsonb, 'null'::jsonb, NULL, '[1,"x"]'::jsonb]`, `'{}'`, `ARRAY['"s"'::jsonb]`, `ARRAY['{}'::jsonb]`}},
	{"c_json_arr", "json[]", [typeRows]string{`ARRAY['{"a" : 1}'::json, '[ ]'::json]`, `'{}'`, `ARRAY[NULL::json]`, `ARRAY['"x"'::json]`}},
	{"c_enum", "it_mood", [typeRows]string{"'happy'", "'sad'", `'it''s "ok"'`, "'happy'"}},
	{"c_enum_arr", "it_mood[]", [typeRows]string{"'{happy,sad}'", "'{}'", `ARRAY['it''s "ok"'::it_mood, NULL]`, "'{sad}'"}},
	{"c_inet", "inet", [typeRows]string{"'192.168.0.1/24'", "'::1'", "'10.0.0.1'", "'2001:db8::ff00:42:8329/64'"}},
	{"c_cidr", "cidr", [typeRows]string{"'10.0.0.0/8'", "'2001:db8::/32'", "'192.168.1.0/24'", "'0.0.0.0/0'"}},
	{"c_inet_arr", "inet[]", [typeRows]string{"'{10.0.0.1,::1}'", "'{}'", "'{NULL}'", "'{127.0.0.1/8}'"}},
	{"c_macaddr", "macaddr", [typeRows]string{"'08:00:2b:01:02:03'", "'ff:ff:ff:ff:ff:ff'", "'00:00:00:00:00:00'", "'0800.2b01.0204'"}},
	{"c_money", "money", [typeRows]string{"'12.34'", "'-92233720368547758.08'", "'0'", "'92233720368547758.07'"}},
	{"c_domain", "it_posint", [typeRows]string{"1", "2147483647", "42", "7"}},
	{"c_text_domain", "it_code", [typeRows]string{"'AB'", "'ZZ'", "'Q\"'", "'ñ'"}},
	{"c_int4range", "int4range", [typeRows]string{"'[1,10)'", "'empty'", "'(,5]'", "'[3,)'"}},
	{"c_tstzrange", "tstzrange", [typeRows]string{"'[2024-01-01 00:00+02,2024-02-01)'", "'empty'", "'(,infinity)'", "'[-infinity,2024-01-01]'"}},
	{"c_bit", "bit(4)", [typeRows]string{"B'1010'", "B'0000'", "B'1111'", "B'0001'"}},
	{"c_varbit", "varbit", [typeRows]string{"B'1'", "B''", "B'101010101010101010101'", "B'0'"}},
	{"c_point", "point", [typeRows]string{"'(1.5,-2)'", "'(0,0)'", "'(1e+100,NaN)'", "'(-0,3)'"}},
	{"c_xml", "xml", [typeRows]string{"'<a b=\"1\">x &amp; y</a>'", "'<e/>'", "'text only'", "'<ü/>'"}},
	{"c_tsvector", "tsvector", [typeRows]string{"'a fat cat'", "''", `'''quoted word'':1A'`, "'ü:3'"}},
	{"c_composite", "it_pair", [typeRows]string{"ROW(1, 'one')::it_pair", `ROW(NULL, 'a "b"')::it_pair`, "ROW(-1, '')::it_pair", "ROW(0, NULL)::it_pair"}},
}

// typesSetup creates the enum, domains, composite type and table of typeColumns and inserts
// rows 1..typeRows.
func typesSetup(e *env) {
	var cols, inserts []string
	for _, c := range typeColumns {
		cols = append(cols, c.name+" "+c.sqlType)
	}
	for row := range typeRows {
		vals := []string{fmt.Sprint(row + 1)}
		for _, c := range typeColumns {
			v := c.values[row]
			if v == "" {
				v = "NULL"
			}
			vals = append(vals, v)
		}
		inserts = append(inserts, fmt.Sprintf("INSERT INTO types VALUES (%s)", strings.Join(vals, ", ")))
	}
	e.exec(append([]string{
		`CREATE TYPE it_mood AS ENUM ('happy', 'sad', 'it''s "ok"')`,
		`CREATE DOMAIN it_posint AS int4 CHECK (VALUE > 0)`,
		`CREATE DOMAIN it_code AS text CHECK (VALUE <> '')`,
		`CREATE TYPE it_pair AS (n int, s text)`,
		fmt.Sprintf("CREATE TABLE types (id int PRIMARY KEY, %s)", strings.Join(cols, ", ")),
	}, inserts...)...)
}

// afterImages returns the after image of every record of recs by its "id", and the records
// by id, failing on a record without an after image or with an unexpected op.
func afterImages(t testing.TB, recs []*kgo.Record) (map[int]map[string]json.RawMessage, map[int]*envelope) {
	t.Helper()
	after := make(map[int]map[string]json.RawMessage)
	envs := make(map[int]*envelope)
	for _, r := range recs {
		env := decode(t, r)
		if env == nil || env.After == nil {
			t.Fatalf("record at offset %d has no after image: %s", r.Offset, r.Value)
		}
		var id int
		if err := json.Unmarshal(env.After["id"], &id); err != nil {
			t.Fatalf("record at offset %d: id %s: %v", r.Offset, env.After["id"], err)
		}
		if _, dup := after[id]; dup {
			t.Fatalf("id %d published twice", id)
		}
		after[id] = env.After
		envs[id] = env
	}
	return after, envs
}

// TestTypesSnapshotEqualsReplication: a value read by the snapshot (COPY) and the same value
// arriving through replication (pgoutput) encode byte-identically, for every type.
func TestTypesSnapshotEqualsReplication(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	typesSetup(e)
	// Different database defaults must not change any rendering: the service pins its own.
	e.exec(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET DateStyle = ''SQL, DMY''', current_database());
		EXECUTE format('ALTER DATABASE %I SET TimeZone = ''Asia/Kolkata''', current_database());
		EXECUTE format('ALTER DATABASE %I SET IntervalStyle = ''iso_8601''', current_database());
		EXECUTE format('ALTER DATABASE %I SET extra_float_digits = 0', current_database()); END $$`)

	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.types"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, 1, "public.types")

	// The same values again, now through replication: one transaction, and one row per
	// transaction, so that both paths of the replication stage are covered.
	cols := make([]string, len(typeColumns))
	for i, c := range typeColumns {
		cols[i] = c.name
	}
	list := strings.Join(cols, ", ")
	e.exec(fmt.Sprintf("INSERT INTO types SELECT id + %d, %s FROM types WHERE id <= 2", replicaOffset, list))
	for id := 3; id <= typeRows; id++ {
		e.exec(fmt.Sprintf("INSERT INTO types SELECT id + %d, %s FROM types WHERE id = %d", replicaOffset, list, id))
	}
	lsn := e.insertLSN(ctx)
	e.waitFor(p, 2*time.Minute, lsn, "public.types")

	after, envs := afterImages(t, e.readTopic(e.topic("public.types")))
	if len(after) != 2*typeRows {
		t.Fatalf("topic has %d rows, want %d", len(after), 2*typeRows)
	}
	for id := 1; id <= typeRows; id++ {
		if s, r := envs[id], envs[id+replicaOffset]; s.Op != "r" || !s.Source.Snapshot || r.Op != "c" || r.Source.Snapshot {
			t.Fatalf("row %d: snapshot op %q (snapshot=%v), replicated op %q (snapshot=%v); want r/true and c/false",
				id, s.Op, s.Source.Snapshot, r.Op, r.Source.Snapshot)
		}
		if got, want := len(after[id]), len(typeColumns)+1; got != want || len(after[id+replicaOffset]) != want {
			t.Errorf("row %d: %d and %d columns in the after images, want %d", id, got, len(after[id+replicaOffset]), want)
		}
	}

	for _, c := range typeColumns {
		t.Run(c.sqlType+"/"+c.name, func(t *testing.T) {
			for id := 1; id <= typeRows; id++ {
				snap, ok1 := after[id][c.name]
				repl, ok2 := after[id+replicaOffset][c.name]
				if !ok1 || !ok2 {
					t.Fatalf("row %d: column missing (snapshot %v, replication %v)", id, ok1, ok2)
				}
				if string(snap) != string(repl) {
					t.Errorf("row %d (%s): snapshot and replication differ:\n snapshot    %s\n replication %s",
						id, c.values[id-1], snap, repl)
				}
				if !json.Valid(snap) {
					t.Errorf("row %d: invalid JSON %s", id, snap)
				}
				if id == typeRows && string(snap) != "null" {
					t.Errorf("row %d: SQL NULL encoded as %s, want null", id, snap)
				}
			}
		})
	}

	// Exact encodings of the mapping table.
	exact := []struct {
		id    int
		col   string
		want  string
		check string // "" exact; "suffix": ends with want
	}{
		{1, "c_int2", `42`, ""},
		{2, "c_int8", `-9223372036854775808`, ""},
		{1, "c_int8", `9007199254740993`, ""},
		{1, "c_oid", `4294967295`, ""},
		{1, "c_numeric", `"1.50"`, ""},
		{2, "c_numeric", `"NaN"`, ""},
		{3, "c_numeric", `"123456789012345678901234567890.123456789012345678901234567890"`, ""},
		{1, "c_numeric_scaled", `"1.5000"`, ""},
		{1, "c_float4", `1.5`, ""},
		{2, "c_float4", `"NaN"`, ""},
		{3, "c_float4", `"-Infinity"`, ""},
		{1, "c_float8", `0.1`, ""},
		{2, "c_float8", `"NaN"`, ""},
		{3, "c_float8", `"Infinity"`, ""},
		{4, "c_float8", `-0`, ""},
		{1, "c_float8_big", `1e+100`, ""},
		{1, "c_bool", `true`, ""},
		{2, "c_bool", `false`, ""},
		{1, "c_char", `"ab      "`, ""},
		{1, "c_bytea", `"3q2+7w=="`, ""},
		{2, "c_bytea", `""`, ""},
		{1, "c_uuid", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`, ""},
		{1, "c_date", `"2024-01-31"`, ""},
		{2, "c_date", `"infinity"`, ""},
		{4, "c_date", `"0044-03-15 BC"`, ""},
		{1, "c_time", `"12:34:56.5"`, ""},
		{1, "c_timetz", `"12:34:56.5+05:30"`, ""},
		{1, "c_timestamp", `"2024-01-31T12:34:56.123456"`, ""},
		{1, "c_timestamptz", `"2024-01-31T10:34:56.123Z"`, ""},
		{2, "c_timestamptz", `"infinity"`, ""},
		{3, "c_timestamptz", `"-infinity"`, ""},
		{4, "c_timestamptz", `Z BC"`, "suffix"},
		{1, "c_interval", `"1 year 2 mons -3 days +04:05:06.7"`, ""},
		{1, "c_json", `{"b": 1,  "a": [1, 2.50, "x\"y"]}`, ""},
		{2, "c_json", `null`, ""},
		{1, "c_int4_arr", `[1,2,3]`, ""},
		{3, "c_int4_arr", `[null,-1,null]`, ""},
		{4, "c_int4_arr", `[7,8]`, ""},
		{1, "c_int8_2d", `[[1,2],[3,4]]`, ""},
		{1, "c_text_arr", `["a","b c","d,e"]`, ""},
		{2, "c_text_arr", `["quote \"","back\\slash","NULL","",null,"{}"]`, ""},
		{1, "c_float8_arr", `[0.1,"NaN","Infinity","-Infinity",-0,1e+100]`, ""},
		{1, "c_bytea_arr", `["3q0=","",null]`, ""},
		{1, "c_enum", `"happy"`, ""},
		{3, "c_enum", `"it's \"ok\""`, ""},
		{1, "c_money", `"$12.34"`, ""},
		{1, "c_domain", `"1"`, ""},
		{1, "c_inet", `"192.168.0.1/24"`, ""},
	}
	for _, x := range exact {
		got := string(after[x.id][x.col])
		ok := got == x.want
		if x.check == "suffix" {
			ok = strings.HasSuffix(got, x.want)
		}
		if !ok {
			t.Errorf("row %d %s = %s, want %s%s", x.id, x.col, got, map[string]string{"suffix": "... "}[x.check], x.want)
		}
	}
}
