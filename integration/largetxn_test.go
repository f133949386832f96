package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

var largeID = change.ExportID{Schema: "public", Table: "large"}

// newLargeEnv is newEnv with a topic prefix whose topics are deleted at cleanup (a large
// transaction leaves gigabytes in the shared broker).
func newLargeEnv(t *testing.T) *env {
	e := newEnv(t)
	e.prefix = testenv.NewTopicPrefix(t)
	e.exec(`CREATE TABLE large (id bigint PRIMARY KEY, pad text NOT NULL)`)
	return e
}

// insertLarge inserts rows rows of about 500 bytes each in one transaction and returns the WAL
// position right after its commit.
func (e *env) insertLarge(ctx context.Context, rows int) change.LSN {
	e.t.Helper()
	c := e.conn()
	// 15 × 32 hex characters: 480 bytes of text per row, not compressible by TOAST (rows are
	// below its threshold anyway).
	if _, err := c.Exec(ctx, fmt.Sprintf(`INSERT INTO large SELECT g, repeat(md5(g::text), 15) FROM generate_series(1, %d) g`, rows)); err != nil {
		e.t.Fatalf("insert %d rows: %v", rows, err)
	}
	return e.currentLSN(ctx)
}

// largeTopic reads the large table's topic read-committed and checks that it holds each of the
// rows 1..rows exactly once, as creates of one transaction. It returns the offsets of the data
// records (for the watermark check) and their commit LSN.
func (e *env) largeTopic(rows int) (offsets []int64, commit change.LSN) {
	e.t.Helper()
	seen := make([]bool, rows+1)
	dups, bad := 0, 0
	lsns := map[string]int{}
	e.scanTopic(e.topic("public.large"), kgo.ReadCommitted(), func(r *kgo.Record) {
		if r.Partition != 0 {
			e.t.Fatalf("record in partition %d; the test topic has one", r.Partition)
		}
		offsets = append(offsets, r.Offset)
		id, err := strconv.Atoi(string(bytes.TrimSuffix(bytes.TrimPrefix(r.Key, []byte(`{"id":`)), []byte(`}`))))
		if err != nil || id < 1 || id > rows || !bytes.Contains(r.Value, []byte(`"op":"c"`)) {
			bad++
			return
		}
		if seen[id] {
			dups++
		}
		seen[id] = true
		for _, h := range r.Headers {
			if h.Key == "tidemark.lsn" {
				lsns[string(h.Value)]++
			}
		}
	})
	missing := 0
	for id := 1; id <= rows; id++ {
		if !seen[id] {
			missing++
		}
	}
	if dups > 0 || missing > 0 || bad > 0 || len(offsets) != rows {
		e.t.Fatalf("topic holds %d records for %d rows: %d duplicates, %d missing, %d not creates of the rows", len(offsets), rows, dups, missing, bad)
	}
	if len(lsns) != 1 {
		e.t.Fatalf("records carry LSNs %v, want the one commit LSN of the transaction", lsns)
	}
	for s := range lsns {
		l, err := change.ParseLSN(s)
		if err != nil {
			e.t.Fatal(err)
		}
		commit = l
	}
	return offsets, commit
}

// checkNoPartialWatermark checks every watermark record of the large table: a consumer that reads
// the topic up to the record's offsets sees none or all of the transaction committing at commit,
// and a watermark above commit covers all of it. It returns the number of records checked.
func checkNoPartialWatermark(t testing.TB, recs []watermark.Record, offsets []int64, commit change.LSN) int {
	t.Helper()
	n := 0
	for _, r := range recs {
		if r.Export != largeID || r.Watermark == nil {
			continue
		}
		n++
		below, _ := slices.BinarySearch(offsets, r.Offsets[0]) // data records below the offset
		switch {
		case below != 0 && below != len(offsets):
			t.Errorf("watermark %s at %s names offset %d: a consumer reading up to it sees %d of the transaction's %d records",
				*r.Watermark, r.Time.Format(time.RFC3339Nano), r.Offsets[0], below, len(offsets))
		case *r.Watermark > commit && below != len(offsets):
			t.Errorf("watermark %s passes the transaction at %s but covers only %d of its %d records", *r.Watermark, commit, below, len(offsets))
		}
	}
	return n
}

// vmHWM returns the peak resident set size of process pid (VmHWM in /proc/<pid>/status).
func vmHWM(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read status of cdc: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// slotSpill returns how many bytes PostgreSQL's decoding of slot spilled to disk (the server's
// own spilling of large transactions, pg_stat_replication_slots).
func (e *env) slotSpill(ctx context.Context) int64 {
	e.t.Helper()
	var n int64
	if err := e.conn().QueryRow(ctx, `SELECT coalesce(sum(spill_bytes), 0)::bigint FROM pg_stat_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// largeTxnRSSLimit bounds cdc's peak RSS while it publishes a 1 GB transaction. What cdc holds
// of one transaction: at most 8 pieces of 4 MiB between the replication stage and Kafka (32
// MiB), the sink's batch of up to 16 MiB referring to the same records, the Kafka client's
// buffer of 32 MiB, and the replication stage's 4096 raw messages of about 600 bytes: under 100
// MiB live, about twice that with Go's default GC target. 512 MiB leaves room for the runtime
// and is a quarter of what holding the transaction whole needs (its records alone are about
// 2 GB).
const largeTxnRSSLimit = 512 << 20

// TestLargeTransaction: one PostgreSQL transaction of 2,000,000 rows of about 500 bytes (about
// 1 GB of changes, 2 GB of records) is streamed in exactly-once mode with a Kafka transaction
// timeout of 10 s, far below the time the transaction takes to publish. Every row arrives once,
// no watermark record lets a consumer see part of the transaction, and cdc's peak RSS stays
// below largeTxnRSSLimit.
func TestLargeTransaction(t *testing.T) {
	const rows = 2_000_000
	e := newLargeEnv(t)
	ctx := t.Context()
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.large"
	vars["CDC_KAFKA_TRANSACTION_TIMEOUT"] = "10s"
	rec := e.recordWatermarks()
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.large")

	start := time.Now()
	after := e.insertLarge(ctx, rows)
	committed := time.Now()
	t.Logf("inserted %d rows in one transaction in %s", rows, committed.Sub(start).Round(time.Millisecond))
	e.waitFor(p, 20*time.Minute, after, "public.large")
	took := time.Since(committed)
	peak := vmHWM(t, p.cmd.Process.Pid)
	spill := e.slotSpill(ctx)
	if done, err := p.exited(); done {
		t.Fatalf("cdc exited: %v", err)
	}

	offsets, commit := e.largeTopic(rows)
	pieces := 0
	for line := range strings.SplitSeq(p.log.String(), "\n") {
		if strings.Contains(line, "large transaction handed over") {
			if i := strings.Index(line, "pieces="); i >= 0 {
				pieces, _ = strconv.Atoi(strings.Fields(line[i+len("pieces="):])[0])
			}
		}
	}
	n := checkNoPartialWatermark(t, rec.all(), offsets, commit)
	t.Logf("large transaction: %d rows committed at %s, published in %d pieces; from its commit to the watermark passing it: %s (%.0f rows/s); "+
		"cdc peak RSS (VmHWM) %.1f MiB (limit %d MiB); PostgreSQL spilled %.0f MiB decoding it; %d watermark records checked",
		rows, commit, pieces, took.Round(time.Millisecond), float64(rows)/took.Seconds(),
		float64(peak)/(1<<20), largeTxnRSSLimit>>20, float64(spill)/(1<<20), n)
	if pieces < 2 {
		t.Errorf("the transaction was published in %d pieces; want several", pieces)
	}
	if peak > largeTxnRSSLimit {
		t.Errorf("cdc peak RSS %d MiB, want at most %d MiB", peak>>20, largeTxnRSSLimit>>20)
	}
	if n == 0 {
		t.Error("no watermark record of the table was seen; the check shows nothing")
	}
	if strings.Contains(p.log.String(), "pipeline failed") {
		t.Errorf("the pipeline restarted while publishing the transaction (a Kafka transaction timed out?)")
	}
}

// TestLargeTransactionKilled: cdc is killed (SIGKILL) twice while a transaction of 300,000 rows
// is published in pieces of 256 KiB across Kafka transactions. Each restart skips what the
// killed instance committed: in the end every row is in the topic exactly once (read-committed),
// and no watermark record ever covers part of the transaction.
func TestLargeTransactionKilled(t *testing.T) {
	const rows = 300_000
	e := newLargeEnv(t)
	ctx := t.Context()
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.large"
	vars["CDC_TXN_PIECE_SIZE"] = "256KiB"
	rec := e.recordWatermarks()
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.large")

	after := e.insertLarge(ctx, rows)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// committedRecords is the committed end offset of the topic: records of committed Kafka
	// transactions, plus their commit markers.
	committedRecords := func() int64 {
		ends, err := adm.ListCommittedOffsets(ctx, e.topic("public.large"))
		if err != nil {
			return 0
		}
		o, _ := ends.Lookup(e.topic("public.large"), 0)
		return o.Offset
	}
	rng := rand.New(rand.NewPCG(9, uint64(time.Now().UnixNano())))
	for kill := range 2 {
		// Kill once this life committed some of the transaction, before it committed all.
		threshold := committedRecords() + int64(rng.IntN(rows/3))
		deadline := time.Now().Add(3 * time.Minute)
		for committedRecords() <= threshold {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: no progress of the transaction in Kafka within 3m", kill+1)
			}
			time.Sleep(20 * time.Millisecond)
		}
		got := committedRecords()
		p.stop(syscall.SIGKILL)
		if got >= rows {
			t.Fatalf("kill %d came after the whole transaction was committed (%d records); the test shows nothing", kill+1, got)
		}
		t.Logf("kill %d: %d of %d records committed", kill+1, got, rows)
		p = e.startCDC(vars)
	}
	e.waitFor(p, 5*time.Minute, after, "public.large")
	if !containsLog(p, "resuming a transaction published in part") {
		t.Errorf("the last life did not resume the partly published transaction")
	}
	offsets, commit := e.largeTopic(rows)
	n := checkNoPartialWatermark(t, rec.all(), offsets, commit)
	produced := 0
	e.scanTopic(e.topic("public.large"), kgo.ReadUncommitted(), func(*kgo.Record) { produced++ })
	t.Logf("%d rows, each once read-committed after 2 kills; %d records produced over all lives (%.3f × the rows); %d watermark records checked",
		rows, produced, float64(produced)/rows, n)
	if n == 0 {
		t.Error("no watermark record of the table was seen; the check shows nothing")
	}
}
