package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestManyTables: a publication FOR ALL TABLES of many small tables (CDC_MANY_TABLES, 300 in
// make test; issue 32 asks about 10,000) starts, hydrates every table, logs no line per table at
// WARN and its per-table notices in summaries, and answers /readyz. It reports (not asserts) the time from start to all hydrated, cdc's
// peak RSS, the watermark records per second once idle, and the size and time of /status. On
// c9cb695, 3,000 tables never started (one CreateTopics request for every topic, refused).
func TestManyTables(t *testing.T) {
	n := 300
	if v := bankEnv(t, "CDC_MANY_TABLES", ""); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("CDC_MANY_TABLES=%q", v)
		}
	}
	e := newEnv(t)
	ctx := t.Context()
	// 500 tables a transaction: one transaction's locks are bounded (max_locks_per_transaction).
	for from := 1; from <= n; from += 500 {
		e.exec(fmt.Sprintf(`DO $$ BEGIN FOR i IN %d..%d LOOP
  EXECUTE format('CREATE TABLE t%%s (id int PRIMARY KEY, v text)', i);
  EXECUTE format('INSERT INTO t%%s SELECT g, md5(g::text) FROM generate_series(1, 10) g', i);
END LOOP; END $$`, from, min(from+499, n)))
	}
	e.exec(`CREATE PUBLICATION it_pub FOR ALL TABLES`)
	tables := make([]string, n)
	for i := range tables {
		tables[i] = fmt.Sprintf("public.t%d", i+1)
	}
	vars := e.baseVars()
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	vars["CDC_WATERMARK_INTERVAL"] = "1s"
	// CDC_MANY_PROFILE=<file>: a CPU profile of cdc for 20 s from CDC_MANY_PROFILE_AT seconds
	// after its start (3 unless set).
	profile := bankEnv(t, "CDC_MANY_PROFILE", "")
	profileAt := bankInt(t, "CDC_MANY_PROFILE_AT", 3)
	// CDC_MANY_HEAP=<file>: a heap profile of cdc once every table is hydrated.
	heap := bankEnv(t, "CDC_MANY_HEAP", "")
	const token = "many-tables-profile-token"
	if profile != "" || heap != "" {
		vars["CDC_HTTP_TOKEN"], vars["CDC_HTTP_PPROF"] = token, "true"
	}
	start := time.Now()
	p := e.startCDC(vars)
	if profile != "" {
		go func() {
			time.Sleep(time.Duration(profileAt) * time.Second)
			req, _ := http.NewRequest("GET", "http://"+vars["CDC_HTTP_ADDR"]+"/debug/pprof/profile?seconds=20", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Logf("profile: %v", err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if err := os.WriteFile(profile, b, 0o644); err != nil {
				t.Logf("profile: %v", err)
			}
		}()
	}
	w := &rssWatch{peak: map[string]int64{}, pids: map[string]int{}}
	w.watch("cdc", p.cmd.Process.Pid)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go w.run(wctx)
	e.waitFor(p, time.Duration(n/10+120)*time.Second, e.currentLSN(ctx), tables...)
	hydrated := time.Since(start)
	if heap != "" {
		req, _ := http.NewRequest("GET", "http://"+vars["CDC_HTTP_ADDR"]+"/debug/pprof/heap", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err != nil {
			t.Logf("heap profile: %v", err)
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err := os.WriteFile(heap, b, 0o644); err != nil {
				t.Logf("heap profile: %v", err)
			}
		}
	}
	// Watermark records per second once idle.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	end := func() int64 {
		ends, err := adm.ListEndOffsets(ctx, e.watermarkTopic())
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(e.watermarkTopic(), 0)
		return o.Offset
	}
	time.Sleep(3 * time.Second)
	before := end()
	time.Sleep(10 * time.Second)
	idle := float64(end()-before) / 10
	// /status and /readyz.
	get := func(path string) (int, int, time.Duration) {
		t0 := time.Now()
		resp, err := http.Get("http://" + vars["CDC_HTTP_ADDR"] + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, len(b), time.Since(t0)
	}
	code, size, took := get("/status")
	if code != http.StatusOK {
		t.Errorf("/status: %d", code)
	}
	if code, _, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d once every table is hydrated", code)
	}
	warns, lines := 0, 0
	perTable := map[string]int{}
	summaries := 0
	for line := range strings.SplitSeq(p.log.String(), "\n") {
		if line == "" {
			continue
		}
		lines++
		if strings.Contains(line, "level=WARN") {
			warns++
		}
		for _, msg := range []string{"chunked copy started", "snapshot of table started", "snapshot of table finished", "export hydrated"} {
			if strings.Contains(line, `msg="`+msg+`"`) {
				perTable[msg]++
			}
		}
		if strings.Contains(line, `msg="exports hydrated"`) {
			summaries++
		}
	}
	if warns > 20 {
		t.Errorf("%d WARN lines for %d tables: per-table notices must be summarised", warns, n)
	}
	// The start's per-table notices come in bursts: a few one by one, the rest in summary lines
	// (internal/burst). On 03b53b8 each was one line per table: 4 lines a table.
	for msg, k := range perTable {
		if k >= n/2 {
			t.Errorf("%d %q lines for %d tables: a start of many tables must summarise them", k, msg, n)
		}
	}
	if summaries == 0 {
		t.Errorf("no \"exports hydrated\" summary line for %d tables hydrated at once", n)
	}
	if f := bankEnv(t, "CDC_MANY_LOG", ""); f != "" {
		// CDC_MANY_LOG=<file>: cdc's log so far, for a timeline of the start.
		if err := os.WriteFile(f, []byte(p.log.String()), 0o644); err != nil {
			t.Log(err)
		}
	}
	t.Logf("REPORT tables=%d hydrated_in=%s cdc_peak_rss=%s idle_watermark_records_per_s=%.1f status_bytes=%d status_time=%s warn_lines=%d log_lines=%d",
		n, hydrated.Round(100*time.Millisecond), mib(w.peakOf("cdc")), idle, size, took.Round(time.Millisecond), warns, lines)
}

// TestTopicRefusedFailsItsTable: a topic Kafka refuses to create (here its name collides with
// an existing topic's, '.' and '_' being the same to Kafka) fails its table alone, with the
// broker's reason on /exports; the other tables of the same poll are copied. Before, the
// refusal failed the whole poll: no table was copied, and the poll was retried for ever.
func TestTopicRefusedFailsItsTable(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(`CREATE TABLE ok1 (id int PRIMARY KEY, v text)`, `CREATE TABLE clash (id int PRIMARY KEY, v text)`,
		`INSERT INTO ok1 VALUES (1, 'a')`, `INSERT INTO clash VALUES (1, 'x')`)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	squat := strings.ReplaceAll(e.topic("public.clash"), ".", "_")
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, squat); err != nil {
		t.Fatal(err)
	}
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.ok1,public.clash"
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	// With the token /exports shows an export's error text (else only its class).
	vars["CDC_HTTP_TOKEN"] = httpToken
	p := e.startCDC(vars)
	e.waitFor(p, time.Minute, e.currentLSN(ctx), "public.ok1")
	var exports []struct {
		Export, State, Error string
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := httpCall(t, http.MethodGet, "http://"+vars["CDC_HTTP_ADDR"]+"/exports", map[string]string{"Authorization": "Bearer " + httpToken}, "")
		if err := json.Unmarshal([]byte(body), &exports); err != nil {
			t.Fatalf("/exports: %v: %s", err, body)
		}
		i := slices.IndexFunc(exports, func(x struct{ Export, State, Error string }) bool { return x.Export == "public.clash" })
		if i >= 0 && exports[i].State == "failed" {
			if !strings.Contains(exports[i].Error, "collides") {
				t.Errorf("public.clash failed with %q; want the broker's reason (collides with %s)", exports[i].Error, squat)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/exports: %+v; want public.clash failed", exports)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
