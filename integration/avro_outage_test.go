package integration

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	tmavro "github.com/tidemark/cdc/pkg/format/avro"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// registryOutage is what the HTTP endpoints said while the registry was down.
type registryOutage struct {
	readyz string // /readyz's body when it turned 503 naming the registry
	status string // /status's schema_registry while unreachable
}

// TestAvroRegistryOutage: cdc streams a table in avro under a steady writer; the registry (a
// private Apicurio that keeps its schemas across a restart, as a production registry does) is
// stopped for 30 s while a column is added to that table and a new table joins the publication,
// both needing a registration. /readyz turns 503 naming the registry, /status's registry line
// says unreachable with registrations waiting; once the registry is back, cdc carries on by
// itself: both tables reach their watermarks, every key and value carries an id the registry
// holds under the topic's subjects (one version per shape) and decodes with it, and the topics
// hold exactly the tables' rows: nothing lost.
func TestAvroRegistryOutage(t *testing.T) {
	t.Parallel() // most of it is waiting on the stopped registry: it runs beside the package's other parallel tests
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{Persist: true})
	e := newEnv(t)
	ctx := t.Context()
	e.exec(`CREATE TABLE steady (id int PRIMARY KEY, v text)`, `INSERT INTO steady VALUES (0, 'first')`,
		"CREATE PUBLICATION "+e.pub+" FOR TABLE steady")
	vars := e.baseVars()
	vars["CDC_VALUE_FORMAT"] = "avro"
	vars["CDC_SCHEMA_REGISTRY_URL"] = reg.URL()
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	vars["CDC_PUBLICATION_POLL_INTERVAL"] = "500ms"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.steady")

	var written atomic.Int64
	stopWriter := startSteadyWriter(t, e, &written)
	time.Sleep(2 * time.Second)

	reg.Stop()
	stopped := time.Now()
	e.exec(`ALTER TABLE steady ADD COLUMN extra int`, `INSERT INTO steady VALUES (-1, 'new shape', 7)`,
		`CREATE TABLE late (id int PRIMARY KEY, v text)`, `INSERT INTO late SELECT g, 'late ' || g FROM generate_series(1, 50) g`,
		"ALTER PUBLICATION "+e.pub+" ADD TABLE late")
	out := watchOutage(t, vars["CDC_HTTP_ADDR"], p)
	t.Logf("while the registry was down:\n /readyz %s\n /status schema_registry %s", out.readyz, out.status)
	time.Sleep(time.Until(stopped.Add(30 * time.Second)))
	reg.Start()
	t.Logf("the registry was down for %s", time.Since(stopped).Round(100*time.Millisecond))

	time.Sleep(3 * time.Second)
	stopWriter()
	e.exec(`INSERT INTO late VALUES (1000, 'after')`)
	e.waitFor(p, 3*time.Minute, e.currentLSN(ctx), "public.steady", "public.late")
	waitEndpoint(t, vars["CDC_HTTP_ADDR"], "/readyz", http.StatusOK, `"ready":true`, p)
	waitEndpoint(t, vars["CDC_HTTP_ADDR"], "/status", http.StatusOK, `"schema_registry":{"state":"connected"`, p)
	if done, err := p.exited(); done {
		t.Fatalf("cdc exited: %v", err)
	}
	t.Logf("%d rows written to steady under the outage; cdc restarted its pipeline %d times", written.Load(),
		strings.Count(p.log.String(), "pipeline failed; restarting"))

	checkOutageTopics(t, e, reg.URL())
}

// checkOutageTopics: every record of both tables carries ids the registry holds (one value
// version per shape) and decodes, and the topics hold the tables' rows.
func checkOutageTopics(t *testing.T, e *env, regURL string) {
	t.Helper()
	rc, err := sr.NewClient(sr.URLs(regURL))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := schemareg.New(schemareg.Config{URL: regURL})
	if err != nil {
		t.Fatal(err)
	}
	dec := tmavro.NewDecoder(cl)
	for table, shapes := range map[string]int{"steady": 2, "late": 1} {
		topic := e.topic("public." + table)
		ids := registeredIDs(t, rc, topic, shapes)
		got := avroTopicRows(t, dec, ids, e.readTopic(topic))
		want := tableRows(t, e, table)
		if len(got) != len(want) {
			t.Errorf("%s: the topic holds %d rows, the table %d", table, len(got), len(want))
		}
		for id, row := range want {
			if got[id] != row {
				t.Errorf("%s id %s: the topic has %q, the table %q", table, id, got[id], row)
			}
		}
	}
}

// startSteadyWriter inserts into steady every 20 ms until the returned function is called.
func startSteadyWriter(t *testing.T, e *env, written *atomic.Int64) func() {
	t.Helper()
	conn := e.conn()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := 1; ; id++ {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := conn.Exec(context.Background(), "INSERT INTO steady (id, v) VALUES ($1, $2)", id, fmt.Sprint("row ", id)); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			written.Add(1)
		}
	}()
	return func() { close(done); wg.Wait() }
}

// watchOutage waits until /readyz is 503 naming the schema registry and /status shows it
// unreachable with registrations waiting.
func watchOutage(t *testing.T, addr string, p *proc) registryOutage {
	t.Helper()
	var out registryOutage
	out.readyz = waitEndpoint(t, addr, "/readyz", http.StatusServiceUnavailable, "schema registry", p)
	body := waitEndpoint(t, addr, "/status", http.StatusOK, `"waiting_since"`, p)
	var st struct {
		Registry json.RawMessage `json:"schema_registry"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v", err)
	}
	out.status = string(st.Registry)
	if !strings.Contains(out.status, `"state":"unreachable"`) {
		t.Errorf("/status's registry line while it is down: %s", out.status)
	}
	return out
}

// waitEndpoint polls GET path until it answers code with a body containing want (1 minute).
func waitEndpoint(t *testing.T, addr, path string, code int, want string, p *proc) string {
	t.Helper()
	var got int
	var body string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			body = err.Error()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got, body = resp.StatusCode, string(b)
		if got == code && strings.Contains(body, want) {
			return strings.TrimSpace(body)
		}
	}
	t.Fatalf("%s: %d %s; want %d with %q\n%s", path, got, tail(body, 2000), code, want, tail(p.log.String(), 3000))
	return ""
}

// registeredIDs returns the ids the registry holds under topic's key and value subjects,
// checking that the value subject has one version per shape.
func registeredIDs(t *testing.T, rc *sr.Client, topic string, shapes int) map[uint32]bool {
	t.Helper()
	ids := map[uint32]bool{}
	keySub, valueSub, _ := tmavro.Subjects(topic)
	for _, sub := range []string{keySub, valueSub} {
		ss, err := rc.Schemas(t.Context(), sub)
		if err != nil {
			t.Fatalf("versions of %s: %v", sub, err)
		}
		if sub == valueSub && len(ss) != shapes {
			t.Errorf("subject %s has %d versions, want %d (one per shape)", sub, len(ss), shapes)
		}
		for _, s := range ss {
			ids[uint32(s.ID)] = true
		}
	}
	return ids
}

// avroTopicRows decodes every record of a topic (each key and value must carry an id of ids)
// and returns the rows the topic ends with: id -> "v|extra".
func avroTopicRows(t *testing.T, dec format.Decoder, ids map[uint32]bool, recs []*kgo.Record) map[string]string {
	t.Helper()
	rows := map[string]string{}
	for _, r := range recs {
		for _, b := range [][]byte{r.Key, r.Value} {
			if b != nil && (len(b) < 5 || !ids[binary.BigEndian.Uint32(b[1:5])]) {
				t.Fatalf("%s@%d: schema id % x is not one the registry holds under the topic's subjects %v", r.Topic, r.Offset, b[:min(5, len(b))], ids)
			}
		}
		if r.Value == nil {
			continue
		}
		var rec format.Record
		if err := dec.Decode(&rec, r.Key, r.Value); err != nil {
			t.Fatalf("%s@%d: %v", r.Topic, r.Offset, err)
		}
		var img struct {
			ID    json.Number `json:"id"`
			V     *string     `json:"v"`
			Extra *int        `json:"extra"`
		}
		if rec.Op == change.OpDelete {
			t.Fatalf("%s@%d: a delete; the workload deletes nothing", r.Topic, r.Offset)
		}
		if err := json.Unmarshal(rec.After, &img); err != nil {
			t.Fatalf("%s@%d: after %s: %v", r.Topic, r.Offset, rec.After, err)
		}
		rows[img.ID.String()] = rowText(img.V, img.Extra)
	}
	return rows
}

func rowText(v *string, extra *int) string {
	s := "NULL"
	if v != nil {
		s = *v
	}
	if extra != nil {
		return fmt.Sprintf("%s|%d", s, *extra)
	}
	return s + "|NULL"
}

// tableRows returns a table's rows: id -> "v|extra" (extra NULL where the table has none).
func tableRows(t *testing.T, e *env, table string) map[string]string {
	t.Helper()
	extra := "NULL::int"
	if table == "steady" {
		extra = "extra"
	}
	rs, err := e.conn().Query(t.Context(), fmt.Sprintf("SELECT id::text, v, %s FROM %s", extra, table))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		var id string
		var v *string
		var x *int
		if err := rs.Scan(&id, &v, &x); err != nil {
			t.Fatal(err)
		}
		out[id] = rowText(v, x)
	}
	return out
}
