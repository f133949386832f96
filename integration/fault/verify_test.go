package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// readTopic reads every committed record of topic up to its current end (read-committed).
func readTopic(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	ends, err := kadm.NewClient(admCl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Markers come back too, so a partition ending on a commit marker is seen to end.
		kgo.KeepControlRecords(), kgo.FetchMaxBytes(32<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("reading %s: timed out with %d records, still waiting for %v", topic, len(out), want)
		}
		n := 0
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("fetch %s: %v (retrying)", topic, err)
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
			t.Errorf("reading %s: nothing for 10s with %d records read, still waiting for %v", topic, len(out), want)
			break
		}
	}
	return out
}

// topicReport is what one pass over a table's topic found.
type topicReport struct {
	records    int
	snapshot   int // op r records, every attempt
	changes    int // distinct changes (key, lsn, sequence, op)
	duplicates int // records repeating a change already seen
	disorder   int // changes of a key behind an earlier change of that key
	state      map[string]string
	// gone says, for a key the topic deleted, which record deleted it last.
	gone map[string]string
}

// lightEnvelope is the part of a record value the checks read.
type lightEnvelope struct {
	After  json.RawMessage `json:"after"`
	Op     string          `json:"op"`
	Source struct {
		LSN      uint64 `json:"lsn"`
		Sequence int64  `json:"sequence"`
		Snapshot bool   `json:"snapshot"`
		Attempt  int    `json:"attempt"`
	} `json:"source"`
}

// analyse applies the records in order (the topic materialised by key) and counts changes
// published more than once. A change is identified by (key, source.lsn, source.sequence, op);
// snapshot rows (op r; every attempt has its own LSN) and tombstones are not changes. Examples of
// duplicates and disorder are reported through t.Errorf when dupIsError, t.Logf otherwise.
func analyse(t testing.TB, table string, recs []*kgo.Record, dupIsError bool) topicReport {
	t.Helper()
	type pos struct {
		lsn uint64
		seq int64
	}
	rep := topicReport{records: len(recs), state: make(map[string]string), gone: make(map[string]string)}
	last := make(map[string]pos)
	seen := make(map[string]int64)
	for _, r := range recs {
		k := string(r.Key)
		if r.Value == nil {
			delete(rep.state, k)
			continue
		}
		var env lightEnvelope
		if err := json.Unmarshal(r.Value, &env); err != nil {
			t.Fatalf("record %s[%d]@%d is not an envelope: %v", r.Topic, r.Partition, r.Offset, err)
		}
		if env.Op == "r" || env.Source.Snapshot {
			rep.snapshot++
		} else {
			p := pos{env.Source.LSN, env.Source.Sequence}
			id := fmt.Sprintf("%s/%d/%d/%s", k, p.lsn, p.seq, env.Op)
			if first, ok := seen[id]; ok {
				if rep.duplicates < 3 {
					report := t.Logf
					if dupIsError {
						report = t.Errorf
					}
					report("%s: change %s published twice (offsets %d and %d)", table, id, first, r.Offset)
				}
				rep.duplicates++
			} else {
				seen[id] = r.Offset
				rep.changes++
				if prev, ok := last[k]; ok && (p.lsn < prev.lsn || p.lsn == prev.lsn && p.seq < prev.seq) {
					if rep.disorder < 3 {
						t.Errorf("%s: key %s: change at lsn %d seq %d after lsn %d seq %d (offset %d)",
							table, k, p.lsn, p.seq, prev.lsn, prev.seq, r.Offset)
					}
					rep.disorder++
				}
				last[k] = p
			}
		}
		switch env.Op {
		case "d":
			delete(rep.state, k)
			rep.gone[k] = fmt.Sprintf("offset %d: op d, lsn %d, snapshot %t, attempt %d",
				r.Offset, env.Source.LSN, env.Source.Snapshot, env.Source.Attempt)
		case "t":
			clear(rep.state)
		default:
			rep.state[k] = string(env.After)
		}
	}
	if rep.disorder > 0 {
		t.Errorf("%s: %d changes out of per-key order", table, rep.disorder)
	}
	return rep
}

// compareWithTable reports every key whose materialised row differs from the table's; it
// returns the counts of missing, extra and different keys.
func compareWithTable(t testing.TB, conn *pgx.Conn, table string, rep topicReport) (missing, extra, diff, rows int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := make(map[string]string)
	dbRows, err := conn.Query(ctx, tableSQL[table])
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	for dbRows.Next() {
		var k, v string
		if err := dbRows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	if err := dbRows.Err(); err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	shown := 0
	show := func(format string, args ...any) {
		if shown < 5 {
			t.Errorf(format, args...)
		}
		shown++
	}
	state := rep.state
	for k, v := range want {
		got, ok := state[k]
		switch {
		case !ok:
			missing++
			how := "never published"
			if g, ok := rep.gone[k]; ok {
				how = "deleted by the record at " + g
			}
			show("%s: key %s is in the table but not in the topic (%s; row %s)", table, k, how, v)
		case !sameJSON(got, v):
			diff++
			show("%s: key %s: topic has %s, table has %s", table, k, got, v)
		}
	}
	for k, v := range state {
		if _, ok := want[k]; !ok {
			extra++
			show("%s: key %s is in the topic (%s) but not in the table", table, k, v)
		}
	}
	if missing+extra+diff > 0 {
		t.Errorf("%s: topic differs from table: %d rows in table, %d keys in topic: %d missing, %d extra, %d different",
			table, len(want), len(state), missing, extra, diff)
	}
	return missing, extra, diff, len(want)
}

// sameJSON compares byte for byte, then as canonical JSON (key order, spacing).
func sameJSON(a, b string) bool {
	if a == b {
		return true
	}
	ca, errA := canonical(a)
	cb, errB := canonical(b)
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}

func canonical(s string) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}
