package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/wait"
	"github.com/tidemark/cdc/pkg/watermark"
)

// cdcBinary and applyBinary (tidemark-apply) are built once by TestMain.
var cdcBinary, applyBinary string

func buildCDC() (string, func(), error) {
	dir, err := os.MkdirTemp("", "tidemark-it-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "cdc")
	args := []string{"build", "-o", bin}
	if os.Getenv("CDC_TEST_RACE") != "" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/cdc")...)
	cmd.Dir = ".."
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", nil, fmt.Errorf("build cdc: %w", err)
	}
	applyBinary = filepath.Join(dir, "tidemark-apply")
	applyArgs := append([]string{"build", "-o", applyBinary}, args[3:]...) // args[3:]: -race, if asked
	cmd = exec.Command("go", append(applyArgs, "./cmd/tidemark-apply")...)
	cmd.Dir = ".."
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", nil, fmt.Errorf("build tidemark-apply: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// env is a test's environment: its own database, topic prefix and slot.
type env struct {
	t       testing.TB
	pgURL   string
	brokers []string
	prefix  string
	slot    string
	pub     string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	return &env{
		t:       t,
		pgURL:   testenv.NewDB(t),
		brokers: testenv.Brokers(t),
		prefix:  "it" + suffix + "." + name,
		slot:    "it_" + suffix,
		pub:     "it_pub",
	}
}

func (e *env) exec(sql ...string) {
	e.t.Helper()
	testenv.Exec(e.t, e.pgURL, sql...)
}

func (e *env) conn() *pgx.Conn {
	e.t.Helper()
	c, err := pgx.Connect(context.Background(), e.pgURL)
	if err != nil {
		e.t.Fatalf("connect: %v", err)
	}
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func (e *env) currentLSN(ctx context.Context) change.LSN {
	e.t.Helper()
	var s string
	c := e.conn()
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	l, err := change.ParseLSN(s)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func (e *env) baseVars() map[string]string {
	return map[string]string{
		"CDC_PG_URL":                    e.pgURL,
		"CDC_KAFKA_BROKERS":             strings.Join(e.brokers, ","),
		"CDC_PUBLICATION":               e.pub,
		"CDC_SLOT":                      e.slot,
		"CDC_TOPIC_PREFIX":              e.prefix,
		"CDC_LOG_FORMAT":                "text",
		"CDC_LOG_LEVEL":                 "info",
		"CDC_WATERMARK_INTERVAL":        "200ms",
		"CDC_PUBLICATION_POLL_INTERVAL": "500ms",
	}
}

func (e *env) topic(table string) string {
	id, err := change.ParseExportID(table)
	if err != nil {
		e.t.Fatal(err)
	}
	return change.TopicName(e.prefix, id)
}

func (e *env) watermarkTopic() string { return e.prefix + ".__watermarks" }

// proc is a running cdc.
type proc struct {
	t    testing.TB
	cmd  *exec.Cmd
	log  *testenv.LogBuffer
	done chan error
}

// startCDC runs cdc with vars and stops it (SIGTERM) at cleanup if still running.
func (e *env) startCDC(vars map[string]string) *proc {
	e.t.Helper()
	return e.startBinary(cdcBinary, vars)
}

// startBinary runs one of the built binaries with vars and stops it (SIGTERM) at cleanup if
// still running.
func (e *env) startBinary(binary string, vars map[string]string) *proc {
	e.t.Helper()
	cmd := exec.Command(binary)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + e.t.TempDir()}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{t: e.t, cmd: cmd, log: &testenv.LogBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", filepath.Base(binary), err)
	}
	go func() { p.done <- cmd.Wait() }()
	e.t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if e.t.Failed() {
			e.t.Logf("%s log:\n%s", filepath.Base(binary), tail(p.log.String(), 12000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// stop signals cdc and waits for it to exit; returns the exit code (-1 when killed).
func (p *proc) stop(sig syscall.Signal) int {
	if p.cmd.ProcessState != nil {
		return p.cmd.ProcessState.ExitCode()
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("cdc did not stop within 60s of %v", sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// exited reports whether cdc has exited (with its error) without waiting.
func (p *proc) exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// waitFor waits until every export has a watermark >= lsn; it fails the test after timeout.
func (e *env) waitFor(p *proc, timeout time.Duration, lsn change.LSN, tables ...string) map[change.ExportID]watermark.Record {
	e.t.Helper()
	w, err := wait.New(e.brokers, e.watermarkTopic())
	if err != nil {
		e.t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ids := make([]change.ExportID, len(tables))
	for i, t := range tables {
		ids[i], _ = change.ParseExportID(t)
	}
	recs, err := w.Until(ctx, lsn, ids...)
	if err != nil {
		if p != nil {
			if done, perr := p.exited(); done {
				e.t.Fatalf("cdc exited (%v) while waiting for watermarks >= %s", perr, lsn)
			}
		}
		e.t.Fatalf("waiting for watermarks of %v >= %s: %v; latest: %+v", tables, lsn, err, w.Latest())
	}
	return recs
}

// readTopic reads every committed record of topic up to its current end.
func (e *env) readTopic(topic string) []*kgo.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListCommittedOffsets(ctx, topic)
	if err != nil {
		e.t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Markers come back too, so a partition ending on a commit marker is seen to end.
		kgo.KeepControlRecords())
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	// Stop when every partition reached its end (or, as a safety net, nothing arrives for 3s).
	for len(want) > 0 {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			e.t.Fatalf("reading %s: timed out with %d records, still waiting for %v", topic, len(out), want)
		}
		n := 0
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				e.t.Fatalf("fetch %s: %v", topic, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
		if n == 0 {
			break
		}
	}
	return out
}

// envelope is the part of a record value the tests look at.
type envelope struct {
	Before map[string]json.RawMessage `json:"before"`
	After  map[string]json.RawMessage `json:"after"`
	Op     string                     `json:"op"`
	Source struct {
		LSN      uint64 `json:"lsn"`
		Sequence int64  `json:"sequence"`
		Snapshot bool   `json:"snapshot"`
		TxID     uint32 `json:"txId"`
	} `json:"source"`
}

func decode(t testing.TB, r *kgo.Record) *envelope {
	t.Helper()
	if r.Value == nil {
		return nil
	}
	var env envelope
	if err := json.Unmarshal(r.Value, &env); err != nil {
		t.Fatalf("record %s[%d]@%d is not an envelope: %v: %s", r.Topic, r.Partition, r.Offset, err, r.Value)
	}
	return &env
}

// materialize applies the records in order: the state of the table by key (the after image).
func materialize(t testing.TB, recs []*kgo.Record) map[string]map[string]json.RawMessage {
	t.Helper()
	state := make(map[string]map[string]json.RawMessage)
	for _, r := range recs {
		env := decode(t, r)
		k := string(r.Key)
		switch {
		case env == nil:
			delete(state, k)
		case env.Op == "d":
			delete(state, k)
		case env.Op == "t":
			clear(state)
		default:
			state[k] = env.After
		}
	}
	return state
}

// checkOrder asserts that per key, records appear in (lsn, sequence) order. A record equal to
// one already seen for its key is a redelivery (at-least-once after a crash) and is skipped.
func checkOrder(t testing.TB, recs []*kgo.Record) {
	t.Helper()
	type pos struct {
		lsn uint64
		seq int64
	}
	last := map[string]pos{}
	seen := map[string]bool{}
	for _, r := range recs {
		env := decode(t, r)
		if env == nil || env.Source.Snapshot {
			continue
		}
		k := string(r.Key)
		p := pos{env.Source.LSN, env.Source.Sequence}
		id := fmt.Sprintf("%s/%d/%d/%s", k, p.lsn, p.seq, env.Op)
		if seen[id] {
			continue
		}
		seen[id] = true
		if prev, ok := last[k]; ok && (p.lsn < prev.lsn || p.lsn == prev.lsn && p.seq < prev.seq) {
			t.Errorf("key %s: change at lsn %d seq %d after lsn %d seq %d (offset %d)", k, p.lsn, p.seq, prev.lsn, prev.seq, r.Offset)
		}
		last[k] = p
	}
}

// tableState reads a table as the topic should show it: key JSON -> column -> JSON value, using
// PostgreSQL's own JSON rendering for the simple types the tests use.
func (e *env) tableState(table string, keyCol string) map[string]map[string]json.RawMessage {
	e.t.Helper()
	c := e.conn()
	rows, err := c.Query(context.Background(), fmt.Sprintf(
		`SELECT json_build_object(%s, %s)::text, row_to_json(t)::text FROM %s t`,
		quoteLiteral(keyCol), pgx.Identifier{keyCol}.Sanitize(), table))
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(map[string]map[string]json.RawMessage)
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			e.t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			e.t.Fatal(err)
		}
		out[compactJSON(e.t, k)] = m
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func compactJSON(t testing.TB, s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("compact %q: %v", s, err)
	}
	return b.String()
}

// assertSameState compares a materialised topic with a table; values are compared as JSON
// after normalising numbers and strings through encoding/json.
func assertSameState(t testing.TB, name string, topic, table map[string]map[string]json.RawMessage) {
	t.Helper()
	missing, extra, diff := 0, 0, 0
	for k, row := range table {
		got, ok := topic[k]
		if !ok {
			if missing < 5 {
				t.Errorf("%s: key %s is in the table but not in the topic", name, k)
			}
			missing++
			continue
		}
		if !sameRow(got, row) {
			if diff < 5 {
				t.Errorf("%s: key %s differs:\n topic %s\n table %s", name, k, mustJSON(got), mustJSON(row))
			}
			diff++
		}
	}
	for k := range topic {
		if _, ok := table[k]; !ok {
			if extra < 5 {
				t.Errorf("%s: key %s is in the topic but not in the table", name, k)
			}
			extra++
		}
	}
	if missing+extra+diff > 0 {
		t.Errorf("%s: %d rows in table, %d keys in topic: %d missing, %d extra, %d different", name, len(table), len(topic), missing, extra, diff)
	}
}

func sameRow(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok {
			return false
		}
		var x, y any
		if json.Unmarshal(av, &x) != nil || json.Unmarshal(bv, &y) != nil {
			return false
		}
		if fmt.Sprint(normalise(x)) != fmt.Sprint(normalise(y)) {
			return false
		}
	}
	return true
}

// normalise maps a numeric string (numeric columns are strings in the topic) and a number to
// the same form.
func normalise(v any) any {
	switch x := v.(type) {
	case float64:
		return fmt.Sprintf("%g", x)
	case string:
		var f float64
		if _, err := fmt.Sscanf(x, "%g", &f); err == nil && fmt.Sprint(f) != "" && isNumeric(x) {
			return fmt.Sprintf("%g", f)
		}
		return x
	}
	return v
}

func isNumeric(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c >= '0' && c <= '9' || c == '.' || (i == 0 && c == '-')) {
			return false
		}
	}
	return true
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// slotConfirmed reads the main slot's confirmed_flush_lsn (0 when absent).
func (e *env) slotConfirmed(ctx context.Context, c *pgx.Conn) change.LSN {
	var s *string
	err := c.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&s)
	if err != nil || s == nil {
		return 0
	}
	l, _ := change.ParseLSN(*s)
	return l
}
