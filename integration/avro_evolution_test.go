package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	tmavro "github.com/tidemark/cdc/pkg/format/avro"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// TestAvroSchemaEvolutionUnderWrites: while a writer inserts into a table every 10 ms, a column
// is added, another retyped (int to bigint, a rewrite) and then dropped, with updates between.
// The table goes through four shapes; the value subject ends with exactly four versions, every
// one of them used by the topic's records, every record decodes with the schema its id names
// (twmb/avro re-encodes it to the same bytes) and has that schema's columns, and the topic's
// rows are the table's.
func TestAvroSchemaEvolutionUnderWrites(t *testing.T) {
	regURL := testenv.Registry(t)
	e := newEnv(t)
	ctx := t.Context()
	e.exec(`CREATE TABLE evo (id int PRIMARY KEY, a text, b int)`, `INSERT INTO evo VALUES (0, 'first', 1)`)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.evo"
	vars["CDC_VALUE_FORMAT"] = "avro"
	vars["CDC_SCHEMA_REGISTRY_URL"] = regURL
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.evo")

	stop := startEvoWriter(t, e)
	for _, ddl := range []string{
		`ALTER TABLE evo ADD COLUMN c text`,
		`UPDATE evo SET c = 'c' || id, b = id WHERE id % 7 = 0`,
		`ALTER TABLE evo ALTER COLUMN b TYPE bigint`,
		`UPDATE evo SET b = b + 5000000000 WHERE id % 5 = 0`,
		`ALTER TABLE evo DROP COLUMN b`,
		`UPDATE evo SET c = 'last ' || id WHERE id % 3 = 0`,
	} {
		time.Sleep(700 * time.Millisecond)
		e.exec(ddl)
	}
	time.Sleep(700 * time.Millisecond)
	writes := stop()
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.evo")

	topic := e.topic("public.evo")
	rc, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	_, valueSub, _ := tmavro.Subjects(topic)
	versions, err := rc.Schemas(ctx, valueSub)
	if err != nil {
		t.Fatalf("versions of %s: %v", valueSub, err)
	}
	registered := map[int]bool{}
	for _, s := range versions {
		registered[s.ID] = true
	}
	used := checkEvolvedRecords(t, rc, e.readTopic(topic), registered)
	t.Logf("%d writes; %d records in %d shapes; subject %s has %d versions", writes, used.records, len(used.ids), valueSub, len(versions))
	if len(versions) != 4 || len(used.ids) != 4 {
		t.Errorf("subject %s has %d versions and the records use %d schema ids; want 4 and 4 (one per shape)", valueSub, len(versions), len(used.ids))
	}
	cl, err := schemareg.New(schemareg.Config{URL: regURL})
	if err != nil {
		t.Fatal(err)
	}
	got := evoTopicRows(t, tmavro.NewDecoder(cl), e.readTopic(topic))
	want := evoTableRows(t, e)
	if len(got) != len(want) {
		t.Errorf("the topic holds %d rows, the table %d", len(got), len(want))
	}
	for id, row := range want {
		if got[id] != row {
			t.Errorf("id %s: the topic has %q, the table %q", id, got[id], row)
		}
	}
}

// startEvoWriter inserts (id, a) every 10 ms until the returned function is called, which
// returns how many rows it wrote.
func startEvoWriter(t *testing.T, e *env) func() int {
	t.Helper()
	conn := e.conn()
	done := make(chan struct{})
	var wg sync.WaitGroup
	n := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := 1; ; id++ {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := conn.Exec(context.Background(), "INSERT INTO evo (id, a) VALUES ($1, $2)", id, fmt.Sprint("row ", id)); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			n++
		}
	}()
	return func() int { close(done); wg.Wait(); return n }
}

type evoUse struct {
	ids     map[int]bool
	records int
}

// checkEvolvedRecords decodes every value with the registry's schema of its id (one of
// registered), re-encodes it to the same bytes, and checks its images have that schema's fields.
func checkEvolvedRecords(t *testing.T, rc *sr.Client, recs []*kgo.Record, registered map[int]bool) evoUse {
	t.Helper()
	use := evoUse{ids: map[int]bool{}}
	parsed := map[int]*avro.Schema{}
	fields := map[int][]string{}
	for _, r := range recs {
		if r.Value == nil {
			continue
		}
		id := int(binary.BigEndian.Uint32(r.Value[1:5]))
		if !registered[id] {
			t.Fatalf("offset %d: schema id %d is not a version of the value subject", r.Offset, id)
		}
		s := parsed[id]
		if s == nil {
			rs, err := rc.SchemaByID(t.Context(), id)
			if err != nil {
				t.Fatalf("schema id %d: %v", id, err)
			}
			if s, err = avro.Parse(rs.Schema); err != nil {
				t.Fatalf("schema id %d: %v", id, err)
			}
			parsed[id], fields[id] = s, rowFieldNames(t, rs.Schema)
		}
		var decoded any
		if rest, err := s.Decode(r.Value[5:], &decoded); err != nil || len(rest) != 0 {
			t.Fatalf("offset %d: decode with schema %d: %v", r.Offset, id, err)
		}
		if again, err := s.Encode(decoded); err != nil || !bytes.Equal(again, r.Value[5:]) {
			t.Fatalf("offset %d: twmb/avro encodes the decoded value to other bytes (%v)", r.Offset, err)
		}
		v, _ := decoded.(map[string]any)
		after, _ := v["after"].(map[string]any)
		var names []string
		for k := range after {
			names = append(names, k)
		}
		slices.Sort(names)
		if after != nil && !slices.Equal(names, fields[id]) {
			t.Fatalf("offset %d: after has %v, schema %d the columns %v", r.Offset, names, id, fields[id])
		}
		use.ids[id] = true
		use.records++
	}
	return use
}

// rowFieldNames returns the sorted field names of an envelope schema's row record.
func rowFieldNames(t *testing.T, schema string) []string {
	t.Helper()
	var env struct {
		Fields []struct {
			Name string          `json:"name"`
			Type json.RawMessage `json:"type"`
		} `json:"fields"`
	}
	if err := json.Unmarshal([]byte(schema), &env); err != nil {
		t.Fatal(err)
	}
	for _, f := range env.Fields {
		if f.Name != "before" {
			continue
		}
		var union []json.RawMessage
		var row struct {
			Fields []struct {
				Name string `json:"name"`
			} `json:"fields"`
		}
		if err := json.Unmarshal(f.Type, &union); err != nil || len(union) != 2 || json.Unmarshal(union[1], &row) != nil {
			t.Fatalf("before is not [null, row]: %s", f.Type)
		}
		var names []string
		for _, rf := range row.Fields {
			names = append(names, rf.Name)
		}
		slices.Sort(names)
		return names
	}
	t.Fatalf("no before field in %s", schema)
	return nil
}

// evoTopicRows returns the rows a topic ends with: id -> "a|c" (NULL for SQL NULL or absent).
func evoTopicRows(t *testing.T, dec format.Decoder, recs []*kgo.Record) map[string]string {
	t.Helper()
	rows := map[string]string{}
	for _, r := range recs {
		if r.Value == nil {
			continue
		}
		var rec format.Record
		if err := dec.Decode(&rec, r.Key, r.Value); err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		if rec.Op == change.OpDelete {
			t.Fatalf("offset %d: a delete; the workload deletes nothing", r.Offset)
		}
		var img map[string]json.RawMessage
		if err := json.Unmarshal(rec.After, &img); err != nil {
			t.Fatal(err)
		}
		var cols []string
		for _, c := range []string{"a", "c"} {
			var s *string
			_ = json.Unmarshal(img[c], &s)
			cols = append(cols, deref2(s))
		}
		rows[string(img["id"])] = strings.Join(cols, "|")
	}
	return rows
}

func deref2(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// evoTableRows returns the table's rows: id -> "a|c".
func evoTableRows(t *testing.T, e *env) map[string]string {
	t.Helper()
	rs, err := e.conn().Query(t.Context(), "SELECT id::text, a, c FROM evo")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		var id string
		var a, c *string
		if err := rs.Scan(&id, &a, &c); err != nil {
			t.Fatal(err)
		}
		out[id] = deref2(a) + "|" + deref2(c)
	}
	return out
}
