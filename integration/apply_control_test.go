package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// controlEnv is a source table public.t1 (100 rows) published by cdc, a replica of it, and
// tidemark-apply keeping it in step, with the replica's t1 caught up.
type controlEnv struct {
	*env
	cdc, apply *proc
	replica    string
	applyVars  map[string]string
}

func newControlEnv(t *testing.T, replicaDDL string) *controlEnv {
	e := newEnv(t)
	e.exec(`CREATE TABLE t1 (id int PRIMARY KEY, name text)`,
		`INSERT INTO t1 SELECT g, 'n' || g FROM generate_series(1, 100) g`,
		`CREATE PUBLICATION it_pub FOR TABLE t1`)
	c := &controlEnv{env: e, replica: testenv.NewDB(t)}
	testenv.Exec(t, c.replica, replicaDDL)
	c.cdc = e.startCDC(e.baseVars())
	c.applyVars = map[string]string{
		"APPLY_TARGET_URL":  c.replica,
		"APPLY_TABLES":      "public.t1",
		"CDC_KAFKA_BROKERS": strings.Join(e.brokers, ","),
		"CDC_TOPIC_PREFIX":  e.prefix,
		"APPLY_LOG_FORMAT":  "text",
	}
	c.apply = e.startBinary(applyBinary, c.applyVars)
	c.rows(100, time.Minute)
	return c
}

// rows waits until the replica's t1 has n rows.
func (c *controlEnv) rows(n int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := c.count()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("replica t1 has %d rows after %s, want %d", got, timeout, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *controlEnv) count() int {
	var n int
	if err := testenv.Conn(c.t, c.replica).QueryRow(context.Background(), `SELECT count(*) FROM t1`).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// forge writes value to the watermark topic as someone other than cdc would, and returns its
// offset.
func (c *controlEnv) forge(key string, value []byte) int64 {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	r, err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: c.watermarkTopic(), Key: []byte(key), Value: value}).First()
	if err != nil {
		c.t.Fatal(err)
	}
	return r.Offset
}

// exits waits for the applier to exit and returns its exit code and how long it took since
// start.
func exits(t *testing.T, p *proc, timeout time.Duration, start time.Time) (int, time.Duration) {
	t.Helper()
	select {
	case <-p.done:
		p.done <- nil
	case <-time.After(timeout):
		t.Fatalf("tidemark-apply still runs %s later", timeout)
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(start)
}

// progressLSN is the applier's stored position.
func (c *controlEnv) progressLSN() change.LSN {
	c.t.Helper()
	var s string
	if err := testenv.Conn(c.t, c.replica).QueryRow(context.Background(), `SELECT lsn FROM tidemark_apply_progress WHERE name = 'tidemark-apply'`).Scan(&s); err != nil {
		c.t.Fatal(err)
	}
	l, err := change.ParseLSN(s)
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// TestApplyControlChannel replays, against cdc and tidemark-apply as processes, records that
// someone other than cdc wrote to the watermark topic: each stops the applier with an error
// naming the record, the replica and its stored position untouched, nothing skipped. On
// c9cb695 the forged watermark moved the stored position to FFFFFFFF/FFFFFF00 and every later
// change was skipped; the partition the topic lacks, and the misspelt table, were waited for
// without a log line.
func TestApplyControlChannel(t *testing.T) {
	forged := change.LSN(0xFFFFFFFF_FFFFFF00)
	t.Run("forged watermark", func(t *testing.T) {
		c := newControlEnv(t, `CREATE TABLE t1 (id int PRIMARY KEY, name text)`)
		before := c.progressLSN()
		v, err := watermark.EncodeQuiet(watermark.Quiet{Mode: watermark.ModeIndependent, Watermark: &forged, Position: forged, Time: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		off := c.forge(watermark.QuietKey, v)
		c.exec(`INSERT INTO t1 SELECT g, 'late' FROM generate_series(101, 110) g`)
		code, took := exits(t, c.apply, time.Minute, start)
		log := c.apply.log.String()
		want := fmt.Sprintf("watermark topic %s[0] offset %d: quiet record's watermark FFFFFFFF/FFFFFF00 is beyond any server's WAL", c.watermarkTopic(), off)
		if code != 1 || !strings.Contains(log, want) {
			t.Fatalf("exit %d after %s, log lacks %q", code, took, want)
		}
		t.Logf("refused in %s, exit %d: %s", took.Round(time.Millisecond), code, firstLine(log, "beyond any server's WAL"))
		if after := c.progressLSN(); after != before && after >= forged {
			t.Errorf("stored position moved to %s", after)
		}
		// Nothing was skipped: the position stays where it was, so an applier started once the
		// topic is repaired resumes from there. (The replica has what it had.)
		if n := c.count(); n > 110 {
			t.Errorf("replica has %d rows", n)
		}
	})
	t.Run("partition the topic lacks", func(t *testing.T) {
		c := newControlEnv(t, `CREATE TABLE t1 (id int PRIMARY KEY, name text)`)
		e := change.ExportID{Schema: "public", Table: "t1"}
		w := c.currentLSN(t.Context())
		v, err := watermark.Encode(watermark.Record{Export: e, Topic: change.TopicName(c.prefix, e), State: watermark.StateHydrated,
			Mode: watermark.ModeIndependent, Watermark: &w, Position: w, Offsets: map[int32]int64{7: 0}, Time: time.Now(),
			Snapshot: &watermark.SnapshotInfo{Attempt: 9, StartOffsets: map[int32]int64{7: 0}}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		off := c.forge(string(watermark.Record{Export: e}.Key()), v)
		code, took := exits(t, c.apply, time.Minute, start)
		log := c.apply.log.String()
		want := fmt.Sprintf("watermark topic %s[0] offset %d: names partition 7 of topic %s, which has 1 partition(s)", c.watermarkTopic(), off, change.TopicName(c.prefix, e))
		if code != 1 || !strings.Contains(log, want) {
			t.Fatalf("exit %d after %s, log lacks %q", code, took, want)
		}
		t.Logf("refused in %s, exit %d", took.Round(time.Millisecond), code)
		if n := c.count(); n != 100 {
			t.Errorf("replica has %d rows, want the 100 it had", n)
		}
	})
	t.Run("system table named", func(t *testing.T) {
		c := newControlEnv(t, `CREATE TABLE t1 (id int PRIMARY KEY, name text)`)
		// An applier told to take every table (the explicit opt-in) meets a record naming
		// pg_catalog.pg_description, with an empty copy: no cdc writes one.
		c.apply.stop(syscall.SIGTERM)
		vars := map[string]string{}
		for k, v := range c.applyVars {
			vars[k] = v
		}
		delete(vars, "APPLY_TABLES")
		vars["APPLY_ALL_TABLES"] = "true"
		var descriptions int
		db := testenv.Conn(t, c.replica)
		if err := db.QueryRow(t.Context(), `SELECT count(*) FROM pg_catalog.pg_description`).Scan(&descriptions); err != nil {
			t.Fatal(err)
		}
		sys := change.ExportID{Schema: "pg_catalog", Table: "pg_description"}
		w := c.currentLSN(t.Context())
		v, err := watermark.Encode(watermark.Record{Export: sys, Topic: change.TopicName(c.prefix, sys), State: watermark.StateHydrated,
			Mode: watermark.ModeIndependent, Watermark: &w, Position: w, Offsets: map[int32]int64{0: 0}, Time: time.Now(),
			Snapshot: &watermark.SnapshotInfo{Attempt: 1, StartOffsets: map[int32]int64{0: 0}}})
		if err != nil {
			t.Fatal(err)
		}
		off := c.forge(string(watermark.Record{Export: sys}.Key()), v)
		start := time.Now()
		c.apply = c.startBinary(applyBinary, vars)
		code, took := exits(t, c.apply, time.Minute, start)
		want := fmt.Sprintf("watermark topic %s[0] offset %d: export pg_catalog.pg_description is in a system schema", c.watermarkTopic(), off)
		if code != 1 || !strings.Contains(c.apply.log.String(), want) {
			t.Fatalf("exit %d after %s, log lacks %q", code, took, want)
		}
		var after int
		if err := db.QueryRow(t.Context(), `SELECT count(*) FROM pg_catalog.pg_description`).Scan(&after); err != nil || after != descriptions {
			t.Errorf("pg_description has %d rows, had %d (%v)", after, descriptions, err)
		}
		if n := c.count(); n != 100 {
			t.Errorf("replica t1 has %d rows, want the 100 it had", n)
		}
	})
	t.Run("misspelt table reported", func(t *testing.T) {
		c := newControlEnv(t, `CREATE TABLE t1 (id int PRIMARY KEY, name text)`)
		vars := map[string]string{}
		for k, v := range c.applyVars {
			vars[k] = v
		}
		vars["APPLY_TABLES"], vars["APPLY_NAME"] = "public.t1,public.tl", "typo"
		p := c.startBinary(applyBinary, vars)
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(p.log.String(), "chosen tables are not in the watermark topic") {
			if time.Now().After(deadline) {
				t.Fatalf("no report of the misspelt table within 30s:\n%s", p.log.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
		if line := firstLine(p.log.String(), "chosen tables are not in the watermark topic"); !strings.Contains(line, "public.tl") || strings.Contains(line, "public.t1 ") {
			t.Errorf("report %q: want public.tl named, and only it", line)
		}
		p.stop(syscall.SIGTERM)
	})
	t.Run("data that does not fit", func(t *testing.T) {
		c := newControlEnv(t, `CREATE TABLE t1 (id int PRIMARY KEY, name varchar(4))`)
		start := time.Now()
		c.exec(`INSERT INTO t1 VALUES (101, 'Ada Lovelace')`, `INSERT INTO t1 VALUES (102, 'Bob')`)
		code, took := exits(t, c.apply, time.Minute, start)
		log := c.apply.log.String()
		m := regexp.MustCompile(`APPLY_SKIP_RECORDS=(\S+:\d+:\d+)`).FindStringSubmatch(log)
		if code != 1 || m == nil || !strings.Contains(log, "SQLSTATE 22001") {
			t.Fatalf("exit %d after %s; want exit 1 naming the record and APPLY_SKIP_RECORDS", code, took)
		}
		t.Logf("refused in %s, exit %d: %s", took.Round(time.Millisecond), code, firstLine(log, "PostgreSQL refused"))
		if n := c.count(); n != 100 {
			t.Errorf("replica has %d rows, want 100: the cut is not applied in part", n)
		}
		vars := map[string]string{}
		for k, v := range c.applyVars {
			vars[k] = v
		}
		vars["APPLY_SKIP_RECORDS"] = m[1]
		c.apply = c.startBinary(applyBinary, vars)
		c.rows(101, time.Minute)
		var name string
		if err := testenv.Conn(t, c.replica).QueryRow(t.Context(), `SELECT name FROM t1 WHERE id = 102`).Scan(&name); err != nil || name != "Bob" {
			t.Errorf("row 102: %q %v", name, err)
		}
		if !strings.Contains(c.apply.log.String(), "record passed over, as APPLY_SKIP_RECORDS asks") {
			t.Errorf("the skip is not logged")
		}
	})
}

// firstLine is the first line of log that contains s.
func firstLine(log, s string) string {
	for line := range strings.SplitSeq(log, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
