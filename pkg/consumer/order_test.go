package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// keyChange queues an update that moves row old to key new: cdc publishes it as a delete of
// the old key (and its tombstone) and a create of the new one, with one sequence number.
func (f *fakeCDC) keyChange(e change.ExportID, lsn change.LSN, xid uint32, seq int64, old, new int, v string) {
	f.add(f.enc[e].Update(nil, src(lsn, xid, seq), row(old, ""), row(new, v), nil))
}

// partitionOf is the partition the fake writes key id to.
func (f *fakeCDC) partitionOf(e change.ExportID, id int) int32 {
	recs, err := f.enc[e].Insert(nil, src(1, 1, 0), row(id, ""))
	if err != nil {
		f.t.Fatal(err)
	}
	h := fnv.New32a()
	h.Write(recs[0].Key)
	return int32(h.Sum32() % uint32(f.parts))
}

// TestKeyChangeAcrossPartitions: the two halves of a key change share a sequence number and
// land in different partitions; the delete of the old key comes before the create of the new
// one, whatever the partitions (c9cb695 broke the tie by partition, so the create came first
// when its partition's number was lower, and tidemark-apply stuck on a duplicate key).
func TestKeyChangeAcrossPartitions(t *testing.T) {
	for _, format := range []codec.Format{codec.FormatJSON, codec.FormatJSONWithSchema} {
		t.Run(string(format), func(t *testing.T) {
			f := newFake(t, 3, format)
			a := f.table("a")
			// Keys whose new partition is below the old one's.
			old, moved := 0, 0
			for o := 1; old == 0; o++ {
				for n := 1000; n < 1100; n++ {
					if f.partitionOf(a, n) < f.partitionOf(a, o) {
						old, moved = o, n
						break
					}
				}
			}
			f.copyRows(a, 100, 1, old)
			f.step(func() { f.mark(a, hydrated, 100, 1, nil) })
			rd := f.reader(nil, false)
			want(t, next(t, rd), fmt.Sprintf("100 joined:a 99/0:a.r%d", old))
			f.keyChange(a, 200, 7, 0, old, moved, "moved")
			f.step(func() { f.mark(a, hydrated, 300, 1, nil) })
			c := next(t, rd)
			want(t, c, fmt.Sprintf("300 200/7:a.d%d,a.c%d", old, moved))
			d, cr := c.Txns[0].Changes[0], c.Txns[0].Changes[1]
			if d.Partition <= cr.Partition {
				t.Fatalf("the delete is in partition %d, the create in %d: want the create's lower", d.Partition, cr.Partition)
			}
			for _, k := range []json.RawMessage{d.OldKey, d.NewKey, cr.OldKey, cr.NewKey} {
				var m map[string]int
				if err := json.Unmarshal(k, &m); err != nil || len(m) != 1 {
					t.Fatalf("a key-change header is not the key's columns: %s (%v)", k, err)
				}
			}
		})
	}
}

// TestResumeAfterRecopy: a reader resumed after a table's re-copy joined delivers nothing of it
// again: the records of the earlier attempt, read again from the watermark topic, are history.
// On c9cb695 the resumed reader reset the table to the older attempt, joined it again and
// delivered the current attempt from below the stored offsets.
func TestResumeAfterRecopy(t *testing.T) {
	f := newFake(t, 2, codec.FormatJSON)
	a, b := f.table("a"), f.table("b")
	f.copyRows(a, 100, 1, 1, 2)
	f.step(func() {
		f.mark(a, hydrated, 100, 1, nil)
		f.mark(b, hydrated, 100, 1, nil)
	})
	rd := f.reader([]change.ExportID{a, b}, true)
	want(t, next(t, rd), "100 joined:a joined:b 99/0:a.r1,a.r2")
	start := f.offsets(a)
	f.step(func() { f.mark(a, hydrating, 100, 2, start) })
	f.copyRows(a, 150, 2, 1, 2)
	f.insert(a, 160, 5, 0, 3, "x")
	f.insert(b, 160, 5, 1, 4, "y")
	f.step(func() {
		f.mark(a, hydrated, 200, 2, start)
		f.mark(b, hydrated, 200, 1, nil)
	})
	want(t, next(t, rd), "100 reset:a")
	want(t, next(t, rd), "200 joined:a 149/0:a.r1,a.r2 160/5:a.c3,b.c4")
	stored, err := json.Marshal(rd.st.position())
	if err != nil {
		t.Fatal(err)
	}
	f.insert(a, 250, 6, 0, 5, "z")
	f.step(func() {
		f.mark(a, hydrated, 300, 2, start)
		f.mark(b, hydrated, 300, 1, nil)
	})
	pos, err := ParsePosition(stored)
	if err != nil {
		t.Fatal(err)
	}
	rd2 := f.reader([]change.ExportID{a, b}, true)
	if err := rd2.Resume(pos); err != nil {
		t.Fatal(err)
	}
	want(t, next(t, rd2), "300 250/6:a.c5")
	noCut(t, rd2, 500*time.Millisecond)
}

// TestResumeWhileHeld: a reader stopped while a re-copied table held the cuts resumes holding
// them: the other table does not go ahead of it after the restart either.
func TestResumeWhileHeld(t *testing.T) {
	f := newFake(t, 2, codec.FormatJSON)
	a, b := f.table("a"), f.table("b")
	f.step(func() {
		f.mark(a, hydrated, 100, 1, nil)
		f.mark(b, hydrated, 100, 1, nil)
	})
	rd := f.reader([]change.ExportID{a, b}, true)
	want(t, next(t, rd), "100 joined:a joined:b")
	start := f.offsets(a)
	f.step(func() { f.mark(a, hydrating, 100, 2, start) })
	c := next(t, rd)
	want(t, c, "100 reset:a")
	if c.Position.Held[a] != 2 {
		t.Fatalf("position %+v: want a held at attempt 2", c.Position)
	}
	stored, _ := json.Marshal(c.Position)
	f.insert(b, 150, 5, 1, 4, "y")
	f.step(func() { f.mark(b, hydrated, 200, 1, nil) })
	pos, err := ParsePosition(stored)
	if err != nil {
		t.Fatal(err)
	}
	rd2 := f.reader([]change.ExportID{a, b}, true)
	if err := rd2.Resume(pos); err != nil {
		t.Fatal(err)
	}
	noCut(t, rd2, time.Second)
	f.copyRows(a, 180, 2, 7)
	f.step(func() { f.mark(a, hydrated, 200, 2, start) })
	want(t, next(t, rd2), "200 joined:a 150/5:b.c4 179/0:a.r7")
}

// TestLoadInParts: a joining table's copy reaches Read in bounded parts, before the cut that
// joins it, while the joined table's cuts go on between them; memory does not grow with the
// copy.
func TestLoadInParts(t *testing.T) {
	f := newFake(t, 3, codec.FormatJSON)
	a, big := f.table("a"), f.table("big")
	f.step(func() { f.mark(a, hydrated, 100, 1, nil) })
	rd, err := New(Config{Brokers: f.brokers, WatermarkTopic: f.wmTopic, PartChanges: 400, HeldBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func() *Cut {
		t.Helper()
		p, err := rd.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return p
	}
	if p := read(); p.Load == nil || !p.Load.Done || p.Changes() != 0 {
		t.Fatalf("a's load: %+v", p)
	}
	want(t, read(), "100 joined:a")
	const rows = 6000
	ids := make([]int, rows)
	for i := range ids {
		ids[i] = i
	}
	start := f.offsets(big)
	for i := 0; i < rows; i += 500 {
		f.copyRows(big, change.LSN(150+i), 1, ids[i:i+500]...)
		f.flushTracked()
	}
	f.insert(a, 7000, 3, 0, 1, "x")
	f.step(func() {
		f.mark(big, hydrated, 7000, 1, start)
		f.mark(a, hydrated, 8000, 1, nil)
	})
	f.step(func() { f.mark(big, hydrated, 8000, 1, start) })
	loaded, maxHeld, lastLoad, cutAt := 0, 0, -1, -1
	var seq []string
	for {
		p := read()
		if n := p.Changes(); n > 400 {
			t.Fatalf("a part of %d changes, want at most 400", n)
		}
		for _, pt := range rd.st.parts[f.topic(big)] {
			maxHeld = max(maxHeld, pt.heldBytes)
		}
		if p.Load != nil {
			loaded += p.Changes()
			seq = append(seq, fmt.Sprintf("load%d", p.Part))
			lastLoad = len(seq)
			continue
		}
		seq = append(seq, describe(p))
		if describe(p) == "8000 7000/3:a.c1" {
			cutAt = len(seq)
		}
		if strings.Contains(describe(p), "joined:big") {
			break
		}
	}
	if loaded != rows {
		t.Fatalf("%d rows loaded, want %d", loaded, rows)
	}
	if maxHeld > 64<<10+1<<20 {
		t.Fatalf("a partition held %d bytes", maxHeld)
	}
	if cutAt < 0 || cutAt > lastLoad || seq[len(seq)-1] != "8000 joined:big" {
		t.Fatalf("want a's cut between big's load parts, big joining after: %s", strings.Join(seq, " "))
	}
}

// TestLoadTakesCopyRowsBehindLaterChanges: cdc acknowledges a change after it published it, so
// the record that says a table is hydrated can carry a watermark below changes published
// before the copy's last chunk. The load takes every copy row below that record's offsets,
// also those behind such a change in their partition; the change comes with the cuts. (A
// load that stopped at the first change past the watermark lost the rows behind it.)
func TestLoadTakesCopyRowsBehindLaterChanges(t *testing.T) {
	f := newFake(t, 1, codec.FormatJSON)
	a := f.table("a")
	start := f.offsets(a)
	f.copyRows(a, 100, 1, 1, 2)
	f.insert(a, 600, 9, 0, 3, "in flight") // published, not acknowledged when hydrated is said
	f.copyRows(a, 450, 1, 4, 5)            // the last chunk, after it
	f.step(func() { f.mark(a, hydrated, 500, 1, start) })
	f.step(func() { f.mark(a, hydrated, 700, 1, start) })
	rd := f.reader(nil, false)
	var got []string
	for len(got) == 0 || !strings.Contains(got[len(got)-1], "a.c3") {
		got = append(got, describe(next(t, rd)))
	}
	if g := strings.Join(got, "|"); g != "700 joined:a 99/0:a.r1,a.r2 449/0:a.r4,a.r5 600/9:a.c3" && g != "500 joined:a 99/0:a.r1,a.r2 449/0:a.r4,a.r5|700 600/9:a.c3" {
		t.Fatalf("cuts %s", g)
	}
}

// TestRecopyHoldsCuts: while a joined table is copied again, no cut moves the other chosen
// tables past it; they come with its new copy. (On c9cb695 the cuts went on without it, and
// the bank replica was torn during every re-copy.)
func TestRecopyHoldsCuts(t *testing.T) {
	f := newFake(t, 3, codec.FormatJSON)
	a, b := f.table("a"), f.table("b")
	f.copyRows(a, 100, 1, 1)
	f.step(func() {
		f.mark(a, hydrated, 100, 1, nil)
		f.mark(b, hydrated, 100, 1, nil)
	})
	rd := f.reader([]change.ExportID{a, b}, true)
	want(t, next(t, rd), "100 joined:a joined:b 99/0:a.r1")
	start := f.offsets(a)
	f.step(func() { f.mark(a, hydrating, 100, 2, start) })
	f.insert(a, 150, 5, 0, 2, "x")
	f.insert(b, 150, 5, 1, 3, "y")
	f.step(func() { f.mark(b, hydrated, 200, 1, nil) })
	want(t, next(t, rd), "100 reset:a")
	noCut(t, rd, time.Second)
	f.copyRows(a, 180, 2, 1, 2)
	f.step(func() { f.mark(a, hydrated, 200, 2, start) })
	want(t, next(t, rd), "200 joined:a 150/5:a.c2,b.c3 179/0:a.r1,a.r2")
}

// TestLoadTakesCopyRowsAtOrAboveWatermark: a chunked copy's rows carry their chunk's low
// marker, and the record that says the table is hydrated carries cdc's stream position when
// the last chunk's high marker arrived, which does not move on the markers themselves: with no
// commit (nor keepalive) between the last chunk's markers, the watermark is below that chunk's
// rows. The load takes every copy row below the record's offsets all the same, and the cuts
// deliver each key's changes after its copy row. (Before, the load left those rows out, and
// the joining cut put them behind the later changes of their partitions: tidemark-apply moved
// a key whose copied row was not there yet, "move row ...: 0 rows affected, want 1", in
// TestCluster's CI run with seed 1796648663900103237.)
func TestLoadTakesCopyRowsAtOrAboveWatermark(t *testing.T) {
	for _, format := range []codec.Format{codec.FormatJSON, codec.FormatJSONWithSchema} {
		t.Run(string(format), func(t *testing.T) {
			f := newFake(t, 3, format)
			b := f.table("b")
			start := f.offsets(b)
			ids := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
			f.copyRows(b, 151, 1, ids...)                         // the one chunk, at its low marker 150
			f.step(func() { f.mark(b, hydrated, 120, 1, start) }) // the stream was at 120
			f.keyChange(b, 200, 7, 0, 5, 1005, "moved")
			f.update(b, 210, 8, 0, 6, "six")
			f.delete(b, 220, 9, 0, 7)
			f.step(func() { f.mark(b, hydrated, 300, 1, start) })

			rd := f.reader(nil, false)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rows := map[string]string{}
			loaded := 0
			for {
				p, err := rd.Read(ctx)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if p.Load != nil {
					loaded += p.Changes()
				}
				if err := materialize(rows, p); err != nil {
					t.Fatalf("%s (part %s)", err, describe(p))
				}
				if p.Load == nil && p.Final && p.LSN >= 300 {
					break
				}
			}
			if loaded != len(ids) {
				t.Fatalf("the load delivered %d changes, want the %d copy rows", loaded, len(ids))
			}
			if len(rows) != 11 || rows["1005"] != "moved" || rows["6"] != "six" || rows["5"] != "" || rows["7"] != "" {
				t.Fatalf("table after the cuts: %v", rows)
			}
		})
	}
}

// materialize applies a part's changes to rows (id → v) as a replica does, strictly: a delete
// needs its row, as does the move of a key change.
func materialize(rows map[string]string, p *Cut) error {
	for _, tx := range p.Txns {
		for _, ch := range tx.Changes {
			id := keyID(ch.Key)
			switch ch.Op {
			case change.OpDelete:
				if _, ok := rows[id]; !ok {
					return fmt.Errorf("%c of key %s at %s[%d]@%d: the row is not there", ch.Op, id, ch.Topic, ch.Partition, ch.Offset)
				}
				delete(rows, id)
			default:
				var after struct {
					V string `json:"v"`
				}
				if err := json.Unmarshal(ch.After, &after); err != nil {
					return fmt.Errorf("after of key %s: %w", id, err)
				}
				rows[id] = after.V
			}
		}
	}
	return nil
}
