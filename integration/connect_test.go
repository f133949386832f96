package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format/connectjson/connectcheck"
	"github.com/tidemark/cdc/pkg/wait"
	"github.com/tidemark/cdc/pkg/watermark"
)

// connectTables has a table per type family, plus a table whose keys move and a keyless one.
// Each is filled from generate_series g by the expressions after its id.
var connectTables = []struct{ name, columns, values string }{
	{"c_num", "i2 int2, i4 int4, i8 int8, o oid, f4 float4, f8 float8, n numeric, n_scaled numeric(12,4), n_neg numeric(7,-2), m money, b bool",
		`(g-10)::int2, g*1000, g::int8*9007199254740, g, g*1.5, CASE WHEN g=2 THEN -1e100 ELSE g/3.0 END,
		 CASE WHEN g=3 THEN NULL WHEN g=4 THEN 123456789012345678901234567890.123456789 ELSE g*1.25-7 END,
		 g*1.0001, g*1234, (g*1.23)::numeric::money, g%2=0`},
	{"c_text", "t text, vc varchar(20), ch char(8), nm name, by bytea, u uuid, j json, jb jsonb, x xml, b1 bit(1), b10 bit(10), vb varbit, ip inet, net cidr, mac macaddr, mac8 macaddr8, tsv tsvector, tsq tsquery, lsn pg_lsn",
		`E'text \t"q" ' || g, 'vc' || g, 'ch' || g, 'nm' || g, decode(md5(g::text), 'hex'), md5(g::text)::uuid,
		 CASE WHEN g%5=0 THEN 'null' ELSE '{"g": ' || g || '}' END::json, jsonb_build_object('g', g, 'a', ARRAY[g, g+1]),
		 ('<r g="' || g || '"/>')::xml, (g%2)::bit(1), g::bit(10), g::bit(10)::varbit, ('10.0.0.' || g)::inet,
		 ('10.' || g || '.0.0/16')::cidr, '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05',
		 to_tsvector('simple', 'fat cat ' || g), to_tsquery('simple', 'fat & cat'), ('0/' || g)::pg_lsn`},
	{"c_time", "d date, t time, t3 time(3), ttz timetz, ts timestamp, ts3 timestamp(3), tstz timestamptz, iv interval",
		`CASE g WHEN 1 THEN 'infinity' WHEN 2 THEN '0044-03-15 BC' ELSE DATE '2024-01-01' + g END,
		 TIME '12:00' + g * interval '1.5 s', TIME '23:59:59.999' - g * interval '1 ms', ('01:02:03.5+0' || (g%10) || ':30')::timetz,
		 CASE g WHEN 1 THEN 'infinity' WHEN 2 THEN '-infinity' WHEN 3 THEN '0044-03-15 12:00:00 BC' ELSE TIMESTAMP '2024-01-01' + g * interval '1 day 1.000001 s' END,
		 TIMESTAMP '1969-12-31 23:59:59.999' + g * interval '1 ms',
		 CASE g WHEN 1 THEN 'infinity' WHEN 2 THEN '-infinity' ELSE TIMESTAMPTZ '2024-01-01 00:00:00+05' + g * interval '1 h 0.25 s' END,
		 make_interval(years => g, months => -g, days => g*3, secs => g * 1.000001)`},
	{"c_geo", "pt point, ln line, ls lseg, bx box, pa_open path, pa_closed path, pg polygon, ci circle",
		`point(g, -g), ('{1,-1,' || g || '}')::line, lseg(point(0, 0), point(g, g)), box(point(g, g), point(0, 0)),
		 ('[(0,0),(' || g || ',' || g || ')]')::path, ('((0,0),(' || g || ',' || g || '),(' || g || ',0))')::path,
		 ('((0,0),(' || g || ',' || g || '),(' || g || ',0))')::polygon, circle(point(g, g), g)`},
	{"c_user", "mood mood, pi posint, pr price, ad addr, r4 int4range, rn numrange, rtz tstzrange, mr int4multirange, fr floatrange, hs hstore, lt ltree, ci citext",
		`(ARRAY['sad','ok','happy'])[g%3+1]::mood, g, g*1.001, ROW('st ' || g || ', "x"', g, ARRAY['a', 'b ' || g], g*1.5)::addr,
		 int4range(g, g+10), numrange(g, g+0.5), tstzrange('2024-01-01 00:00:00+00', TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * interval '1 h'),
		 int4multirange(int4range(1, g+2), int4range(g+5, g+9)), floatrange(g, g + 0.5),
		 hstore(ARRAY['a', 'b "q"'], ARRAY[g::text, NULL]), ('top.n' || g)::ltree, ('MiXeD ' || g)::citext`},
	{"c_arr", "ia int4[], ia_lb int4[], i8_2d int8[][], ta text[], na numeric(6,1)[], moods mood[], ads addr[], da date[], jba jsonb[], ua uuid[], ma money[]",
		`ARRAY[g, NULL, g+1], CASE WHEN g%2=1 THEN '[0:1]={1,2}'::int4[] ELSE ARRAY[g] END, ARRAY[[g, g+1], [g+2, NULL]]::int8[][],
		 ARRAY['a', NULL, 'x"y,' || g], ARRAY[g*1.5, NULL]::numeric(6,1)[], ARRAY['sad', NULL, 'happy']::mood[],
		 ARRAY[ROW('s', g, '{}', 1.0)::addr, NULL], ARRAY[DATE '2024-01-01' + g, NULL], ARRAY['{"a": 1}'::jsonb, 'null'::jsonb, NULL],
		 ARRAY[md5(g::text)::uuid], ARRAY[(g*1000)::money, NULL]`},
	{"c_moves", "v text", `'v' || g`},
}

const connectRows = 20

// TestKafkaConnectReadsJSONWithSchema runs a real Kafka Connect standalone worker (JsonConverter
// with schemas.enable=true for keys and values, FileStreamSink) over every topic of a snapshot
// and a mixed workload in CDC_VALUE_FORMAT=json-with-schema: its task stays RUNNING throughout,
// its log has no conversion error, its file has one line per record, and sampled rows are in it.
func TestKafkaConnectReadsJSONWithSchema(t *testing.T) {
	e := newEnv(t)
	e.exec(
		`CREATE EXTENSION hstore`, `CREATE EXTENSION ltree`, `CREATE EXTENSION citext`,
		`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`,
		`CREATE DOMAIN posint AS int4 CHECK (VALUE > 0)`,
		`CREATE DOMAIN price AS numeric(8,3)`,
		`CREATE TYPE addr AS (street text, zip int4, tags text[], price numeric(10,2))`,
		`CREATE TYPE floatrange AS RANGE (subtype = float8)`,
	)
	var tables []string
	for _, tb := range connectTables {
		e.exec(fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, %s)", tb.name, tb.columns),
			fmt.Sprintf("INSERT INTO %s SELECT g, %s FROM generate_series(1, %d) g", tb.name, tb.values, connectRows),
			fmt.Sprintf("INSERT INTO %s (id) VALUES (100)", tb.name)) // every other column SQL NULL
		tables = append(tables, "public."+tb.name)
	}
	e.exec(`CREATE TABLE c_nokey (v text, n int)`, `ALTER TABLE c_nokey REPLICA IDENTITY FULL`,
		`INSERT INTO c_nokey SELECT 'k' || g, g FROM generate_series(1, 5) g`)
	tables = append(tables, "public.c_nokey")
	e.exec("CREATE PUBLICATION " + e.pub + " FOR TABLE " + strings.Join(tables, ", "))

	vars := e.baseVars()
	vars["CDC_VALUE_FORMAT"] = "json-with-schema"
	p := e.startCDC(vars)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), tables...)

	// A real Kafka Connect worker on every table topic (not the watermark topic).
	sinkFile := filepath.Join(t.TempDir(), "sink.txt")
	name := "tidemark-file-sink-" + e.slot
	conn := testenv.StartConnect(t, e.brokers, map[string]string{
		"key.converter":                  "org.apache.kafka.connect.json.JsonConverter",
		"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
		"key.converter.schemas.enable":   "true",
		"value.converter.schemas.enable": "true",
		"consumer.isolation.level":       "read_committed",
		"consumer.auto.offset.reset":     "earliest",
	}, map[string]string{
		"name":             name,
		"connector.class":  "org.apache.kafka.connect.file.FileStreamSinkConnector",
		"tasks.max":        "1",
		"topics.regex":     "^" + regexp.QuoteMeta(e.prefix) + `\.public\..*`,
		"file":             sinkFile,
		"errors.tolerance": "none",
	})
	watch := watchConnect(t, conn)

	// The mixed workload, streamed.
	for _, tb := range connectTables {
		// Copies of the snapshot rows: the stream must encode the same values to the same bytes.
		e.exec(fmt.Sprintf("INSERT INTO %s SELECT id + 1000, %s FROM %s WHERE id <= %d", tb.name,
			strings.Join(columnNames(tb.columns), ", "), tb.name, connectRows))
	}
	e.exec(
		`UPDATE c_num SET i4 = i4 + 1, n = n * 2 WHERE id % 3 = 0`,
		`UPDATE c_moves SET id = id + 500 WHERE id <= 5`, // key changes: delete, tombstone, create
		`DELETE FROM c_text WHERE id % 4 = 0`,            // deletes and tombstones
		`DELETE FROM c_nokey WHERE n < 3`,
		`BEGIN; UPDATE c_arr SET ia = ia || 9 WHERE id = 2; UPDATE c_user SET mood = 'ok' WHERE id = 2; INSERT INTO c_time (id) VALUES (2000); COMMIT`,
		// A truncate of a table with a key is left out: its null-key record is refused by the
		// compacted topic in either format (a sink matter, reported separately).
		`TRUNCATE c_nokey`,
		`INSERT INTO c_nokey VALUES ('after truncate', 42)`,
		`INSERT INTO c_geo SELECT g, point(g, g) FROM generate_series(3000, 3004) g`,
	)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), tables...)

	// Every record of every topic: a payload that matches its schema exactly (JsonConverter
	// itself coerces a wrong JSON type into 0 or an empty value without complaint).
	total := 0
	records := map[string][]*kgo.Record{}
	for _, tb := range tables {
		recs := e.readTopic(e.topic(tb))
		records[tb] = recs
		total += len(recs)
		for _, r := range recs {
			for _, b := range [][]byte{r.Key, r.Value} {
				if b == nil {
					continue
				}
				if err := connectcheck.Check(b); err != nil {
					t.Fatalf("%s@%d: %v\n%s", r.Topic, r.Offset, err, b)
				}
			}
		}
	}

	// The sink's file reaches one line per record.
	deadline := time.Now().Add(2 * time.Minute)
	var lines []string
	for {
		lines = readLines(t, sinkFile)
		if len(lines) >= total || time.Now().After(deadline) || conn.Exited() {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	watch.stop()
	if len(lines) != total {
		t.Fatalf("FileStreamSink wrote %d lines, the topics hold %d records", len(lines), total)
	}
	if bad := watch.problems(); len(bad) > 0 {
		t.Fatalf("connector not RUNNING throughout: %s", strings.Join(bad, "; "))
	}
	for _, pat := range []string{"DataException", "] ERROR ", "Error converting"} {
		if i := strings.Index(conn.Log.String(), pat); i >= 0 {
			t.Fatalf("Kafka Connect log has %q: %s", pat, tail(conn.Log.String()[i:], 3000))
		}
	}

	// Sampled rows, by key, as the worker's Struct.toString prints them.
	file := strings.Join(lines, "\n")
	for _, want := range []string{
		"after=Struct{id=1,", "after=Struct{id=7,", "after=Struct{id=13,", "after=Struct{id=100}",
		"after=Struct{id=1001,", "after=Struct{id=1020,", "after=Struct{id=501,", "after=Struct{id=505,",
		"before=Struct{id=4}", "after=Struct{id=3004,", "after=Struct{id=2000}", "op=t",
		"after=Struct{v=k5,n=5}", "after=Struct{v=after truncate,n=42}",
	} {
		if !strings.Contains(file, want) {
			t.Errorf("sink file has no %q", want)
		}
	}
	t.Logf("Kafka Connect converted %d records of %d topics into %d lines", total, len(tables), len(lines))

	checkSnapshotEqualsStream(t, records)
	checkConnectSemantics(t, records)
}

func columnNames(columns string) []string {
	var out []string
	depth := 0
	start := 0
	for i, c := range columns + "," {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.Fields(columns[start:i])[0])
				start = i + 1
			}
		}
	}
	return out
}

func readLines(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// connectWatch polls the connector's status until stopped and records every moment it was not
// RUNNING after it first was.
type connectWatch struct {
	mu      sync.Mutex
	bad     []string
	running bool
	polls   int
	done    chan struct{}
	stopped chan struct{}
}

func watchConnect(t testing.TB, c *testenv.Connect) *connectWatch {
	t.Helper()
	w := &connectWatch{done: make(chan struct{}), stopped: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(w.stopped)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s, err := c.Status(ctx)
			cancel()
			w.mu.Lock()
			w.polls++
			switch {
			case c.Exited():
				w.bad = append(w.bad, "the worker exited")
				w.mu.Unlock()
				return
			case err == nil && s.Running():
				w.running = true
			case w.running:
				w.bad = append(w.bad, fmt.Sprintf("status %+v (err %v)", s, err))
			case time.Since(start) > 90*time.Second:
				w.bad = append(w.bad, fmt.Sprintf("not RUNNING 90s after start: %+v (err %v)", s, err))
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *connectWatch) stop() {
	close(w.done)
	<-w.stopped
}

func (w *connectWatch) problems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running {
		return append(w.bad, fmt.Sprintf("never RUNNING in %d polls", w.polls))
	}
	return w.bad
}

// connectValue is a json-with-schema record.
type connectValue struct {
	Schema  json.RawMessage `json:"schema"`
	Payload struct {
		Before map[string]json.RawMessage `json:"before"`
		After  map[string]json.RawMessage `json:"after"`
		Op     string                     `json:"op"`
	} `json:"payload"`
}

func decodeConnect(t testing.TB, r *kgo.Record) *connectValue {
	t.Helper()
	var v connectValue
	if err := json.Unmarshal(r.Value, &v); err != nil {
		t.Fatalf("%s@%d: %v", r.Topic, r.Offset, err)
	}
	return &v
}

// checkSnapshotEqualsStream compares each snapshot row (op r, id k) with its copy inserted
// through the stream (op c, id k+1000): every column's payload is the same bytes.
func checkSnapshotEqualsStream(t *testing.T, records map[string][]*kgo.Record) {
	t.Helper()
	for _, tb := range connectTables {
		snap := map[string]map[string]json.RawMessage{}
		stream := map[string]map[string]json.RawMessage{}
		for _, r := range records["public."+tb.name] {
			if r.Value == nil {
				continue
			}
			v := decodeConnect(t, r)
			if v.Payload.After == nil {
				continue
			}
			id := string(v.Payload.After["id"])
			switch v.Payload.Op {
			case "r":
				snap[id] = v.Payload.After
			case "c":
				stream[id] = v.Payload.After
			}
		}
		compared := 0
		for id, row := range snap {
			var n int
			fmt.Sscan(id, &n)
			if n > connectRows {
				continue
			}
			copyRow, ok := stream[fmt.Sprint(n+1000)]
			if !ok {
				continue // deleted or moved by the workload before the copy? (never: copies come first)
			}
			for col, val := range row {
				if col != "id" && !bytes.Equal(val, copyRow[col]) {
					t.Errorf("%s.%s: snapshot row %s has %s, its streamed copy %s", tb.name, col, id, val, copyRow[col])
				}
			}
			compared++
		}
		if compared != connectRows {
			t.Errorf("%s: compared %d snapshot rows with their streamed copies, want %d", tb.name, compared, connectRows)
		}
	}
}

// checkConnectSemantics spot-checks values whose meaning the format promises.
func checkConnectSemantics(t *testing.T, records map[string][]*kgo.Record) {
	t.Helper()
	find := func(table string, id string, op string) (*kgo.Record, *connectValue) {
		for _, r := range records["public."+table] {
			if r.Value == nil {
				continue
			}
			v := decodeConnect(t, r)
			if v.Payload.Op == op && v.Payload.After != nil && string(v.Payload.After["id"]) == id {
				return r, v
			}
		}
		t.Fatalf("%s: no %s record of id %s", table, op, id)
		return nil, nil
	}
	// JSON null is a document, SQL NULL is null.
	if _, v := find("c_text", "5", "r"); string(v.Payload.After["j"]) != `"null"` {
		t.Errorf("json null: got %s, want \"null\"", v.Payload.After["j"])
	}
	if _, v := find("c_text", "100", "r"); string(v.Payload.After["j"]) != "null" {
		t.Errorf("SQL NULL json: got %s, want null", v.Payload.After["j"])
	}
	// A domain over int4 is a number; hstore is Debezium's JSON string.
	_, v7 := find("c_user", "7", "r")
	if string(v7.Payload.After["pi"]) != "7" {
		t.Errorf("domain over int4: got %s, want 7", v7.Payload.After["pi"])
	}
	if got := string(v7.Payload.After["hs"]); got != `"{\"a\":\"7\",\"b \\\"q\\\"\":null}"` {
		t.Errorf("hstore: got %s", got)
	}
	// Array shapes: flattened, with the header giving them.
	r, v := find("c_arr", "1", "r")
	if string(v.Payload.After["i8_2d"]) != "[1,2,3,null]" || string(v.Payload.After["ia_lb"]) != "[1,2]" {
		t.Errorf("arrays: got i8_2d %s, ia_lb %s", v.Payload.After["i8_2d"], v.Payload.After["ia_lb"])
	}
	dims := ""
	for _, h := range r.Headers {
		if h.Key == "tidemark.array_dims" {
			dims = string(h.Value)
		}
	}
	if dims != `{"after":{"ia_lb":"[0:1]","i8_2d":"[1:2][1:2]"}}` {
		t.Errorf("tidemark.array_dims: got %q", dims)
	}
	// numeric(12,4) 1.0001 is the Decimal 10001 at scale 4.
	if _, v := find("c_num", "1", "r"); string(v.Payload.After["n_scaled"]) != `"`+base64.StdEncoding.EncodeToString(big.NewInt(10001).Bytes())+`"` {
		t.Errorf("numeric(12,4) 1.0001: got %s", v.Payload.After["n_scaled"])
	}
	// date 2024-01-01 + 5 = 2024-01-06 is day 19728.
	if _, v := find("c_time", "5", "r"); string(v.Payload.After["d"]) != "19728" {
		t.Errorf("date: got %s, want 19728", v.Payload.After["d"])
	}
}

// TestJSONWithSchemaRefusalFailsTheTableAlone: a value json-with-schema cannot carry faithfully
// (a float NaN, which JsonConverter would read as 0) fails its table with a failed watermark
// record saying why, in the snapshot and in the stream; the other tables go on.
func TestJSONWithSchemaRefusalFailsTheTableAlone(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE snap_nan (id int PRIMARY KEY, v float8)`,
		`CREATE TABLE stream_nan (id int PRIMARY KEY, v float8)`,
		`CREATE TABLE fine (id int PRIMARY KEY, v float8)`,
		`INSERT INTO snap_nan VALUES (1, 1.5), (2, 'NaN')`,
		`INSERT INTO stream_nan VALUES (1, 1.5)`,
		`INSERT INTO fine VALUES (1, 1.5)`,
	)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.snap_nan,public.stream_nan,public.fine"
	vars["CDC_VALUE_FORMAT"] = "json-with-schema"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, 1, "public.stream_nan", "public.fine")
	e.exec(`INSERT INTO stream_nan VALUES (2, '-Infinity')`, `INSERT INTO fine VALUES (2, 2.5)`)
	lsn := e.currentLSN(ctx)

	w, err := wait.New(e.brokers, e.watermarkTopic())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ids := map[string]change.ExportID{}
	for _, n := range []string{"snap_nan", "stream_nan", "fine"} {
		ids[n] = change.ExportID{Schema: "public", Table: n}
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = w.Poll(pctx)
		cancel()
		l := w.Latest()
		fine := l[ids["fine"]]
		if l[ids["snap_nan"]].State == watermark.StateFailed && l[ids["stream_nan"]].State == watermark.StateFailed &&
			fine.Watermark != nil && *fine.Watermark >= lsn {
			break
		}
		if done, perr := p.exited(); done {
			t.Fatalf("cdc exited (%v); want only the tables with NaN to fail", perr)
		}
	}
	l := w.Latest()
	for _, n := range []string{"snap_nan", "stream_nan"} {
		r := l[ids[n]]
		if r.State != watermark.StateFailed || !strings.Contains(r.Error, "json-with-schema") || !strings.Contains(r.Error, `"v"`) {
			t.Errorf("%s: state %s, error %q; want failed, naming column v and json-with-schema", n, r.State, r.Error)
		}
	}
	if fine := l[ids["fine"]]; fine.State != watermark.StateHydrated || fine.Watermark == nil || *fine.Watermark < lsn {
		t.Errorf("fine: %+v; want hydrated past %s", fine, lsn)
	}
	if restarts := strings.Count(p.log.String(), "pipeline failed; restarting"); restarts > 0 {
		t.Errorf("the pipeline restarted %d times; want the tables to fail alone", restarts)
	}
}
