package consumer

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/watermark"
)

// TestQuietRecords: a quiet record moves a quiet table's watermark; a later quiet record that
// lists it as busy does not move it back, so the cuts do not either.
func TestQuietRecords(t *testing.T) {
	f := newFake(t, 2, codec.FormatJSON)
	a, q := f.table("a"), f.table("q")
	f.step(func() {
		f.mark(a, hydrated, 100, 1, nil)
		f.mark(q, hydrated, 100, 1, nil)
	})
	rd := f.reader(nil, false)
	want(t, next(t, rd), "100 joined:a joined:q")
	f.insert(a, 150, 7, 0, 1, "x")
	f.step(func() {
		f.mark(a, hydrated, 400, 1, nil)
		f.quiet(300)
		f.checkpoint(400)
	})
	want(t, next(t, rd), "300 150/7:a.c1")
	// q turns busy: its own record still says 100; the cuts stay at 300, then go on, one
	// watermark step at a time (a's 400, then q's 480).
	f.insert(q, 450, 8, 0, 5, "y")
	f.insert(a, 460, 9, 0, 2, "z")
	f.step(func() {
		f.mark(a, hydrated, 500, 1, nil)
		f.quiet(500, q)
	})
	f.step(func() { f.mark(q, hydrated, 480, 1, nil) })
	want(t, next(t, rd), "400")
	want(t, next(t, rd), "480 450/8:q.c5 460/9:a.c2")
}

// TestPieces: a transaction cdc published in pieces, across Kafka transactions, with other
// tables' watermark records in between that do not pass it, comes whole in one cut.
func TestPieces(t *testing.T) {
	f := newFake(t, 3, codec.FormatJSON)
	a, b := f.table("a"), f.table("b")
	f.step(func() {
		f.mark(a, hydrated, 100, 1, nil)
		f.mark(b, hydrated, 100, 1, nil)
	})
	rd := f.reader([]change.ExportID{a, b}, false)
	want(t, next(t, rd), "100 joined:a joined:b")
	for i := range 6 {
		f.insert(a, 200, 20, int64(2*i), 10+i, "p")
		f.insert(b, 200, 20, int64(2*i+1), 10+i, "p")
		// Each piece commits with a checkpoint (partial) and b's heartbeat below the transaction.
		f.step(func() { f.mark(b, hydrated, 150, 1, nil) })
	}
	f.step(func() { f.mark(a, hydrated, 150, 1, nil) })
	c := next(t, rd)
	want(t, c, "150")
	f.step(func() {
		f.mark(a, hydrated, 250, 1, nil)
		f.mark(b, hydrated, 250, 1, nil)
	})
	c = next(t, rd)
	if len(c.Txns) != 1 || len(c.Txns[0].Changes) != 12 {
		t.Fatalf("cut %s: want one transaction of 12 changes", describe(c))
	}
	for i, ch := range c.Txns[0].Changes {
		if ch.Source.Sequence != int64(i) {
			t.Fatalf("change %d has sequence %d: %s", i, ch.Source.Sequence, describe(c))
		}
	}
}

// TestRecopyRemovalFailure: a re-copy resets a table and delivers its new copy, and the cuts
// wait for it meanwhile (the other tables do not go ahead of it); a removed
// table leaves at its final watermark; a failed one too, while the other goes on; a truncate is
// delivered once although it is on every partition; an unchosen table being copied holds
// nothing back.
func TestRecopyRemovalFailure(t *testing.T) {
	f := newFake(t, 3, codec.FormatJSON)
	a, b, c, big := f.table("a"), f.table("b"), f.table("c"), f.table("big")
	f.copyRows(a, 100, 1, 1)
	f.step(func() {
		f.mark(a, hydrated, 100, 1, nil)
		f.mark(b, hydrated, 100, 1, nil)
		f.mark(c, hydrated, 100, 1, nil)
		f.mark(big, hydrating, 0, 1, nil)
	})
	rd := f.reader([]change.ExportID{a, b, c}, false)
	want(t, next(t, rd), "100 joined:a joined:b joined:c 99/0:a.r1")

	// a is copied again (attempt 2, starting at the topic's current end).
	f.insert(a, 150, 5, 0, 2, "old") // an old-attempt change nobody will see
	f.insert(b, 150, 5, 1, 7, "b")
	f.flushTracked()
	start := f.offsets(a)
	f.step(func() { f.mark(a, hydrating, 100, 2, start) })
	f.copyRows(a, 180, 2, 1, 3)
	f.truncate(b, 190, 6, 0)
	f.step(func() {
		f.mark(b, hydrated, 200, 1, nil)
		f.mark(c, hydrated, 200, 1, nil)
	})
	// The reset comes as soon as it is read, in a cut of events alone at the last cut's LSN.
	// Then the cuts wait for a's new copy: b and c do not go ahead of it.
	want(t, next(t, rd), "100 reset:a")
	noCut(t, rd, time.Second)
	f.insert(a, 210, 8, 0, 4, "new")
	f.step(func() {
		f.mark(a, hydrated, 220, 2, start)
		f.mark(b, hydrated, 220, 1, nil)
		f.mark(c, hydrated, 220, 1, nil)
	})
	want(t, next(t, rd), "220 joined:a 150/5:b.c7 179/0:a.r1,a.r3 190/6:b.t 210/8:a.c4")

	// b is removed at 230 (its last change at 225); c fails at 240; big, unchosen, still copies.
	f.insert(b, 225, 9, 0, 8, "last")
	f.step(func() {
		f.mark(b, watermark.StateRemoved, 230, 1, nil)
		f.mark(a, hydrated, 260, 2, start)
		f.mark(c, watermark.StateFailed, 240, 1, nil)
	})
	c1 := next(t, rd)
	want(t, c1, "230 removed:b 225/9:b.c8")
	c2 := next(t, rd)
	want(t, c2, "240 failed:c")
	if c2.Events[0].Error != "boom" {
		t.Fatalf("failed event %+v", c2.Events[0])
	}
	want(t, next(t, rd), "260")
}

// TestResume: a reader resumed from a cut's stored position delivers exactly what a reader that
// went on delivers: nothing twice, nothing skipped, also with records held back past the cut.
func TestResume(t *testing.T) {
	f := newFake(t, 3, codec.FormatJSON)
	a, b := f.table("a"), f.table("b")
	f.copyRows(a, 100, 1, 1, 2, 3)
	f.step(func() {
		f.mark(a, hydrated, 100, 1, nil)
		f.mark(b, hydrated, 100, 1, nil)
	})
	for i := range 10 {
		lsn := change.LSN(200 + 10*i)
		f.update(a, lsn, uint32(i), 0, 1+i%3, "x")
		f.insert(b, lsn, uint32(i), 1, i, "y")
		f.flushTracked()
	}
	f.step(func() {
		f.mark(a, hydrated, 300, 1, nil)
		f.mark(b, hydrated, 245, 1, nil)
	})
	rd := f.reader(nil, false)
	first := next(t, rd)
	c := first
	for c.LSN < 245 {
		c = next(t, rd)
	}
	stored, err := json.Marshal(c.Position)
	if err != nil {
		t.Fatal(err)
	}
	f.step(func() { f.mark(b, hydrated, 300, 1, nil) })
	rest := next(t, rd)

	pos, err := ParsePosition(stored)
	if err != nil {
		t.Fatal(err)
	}
	rd2 := f.reader(nil, false)
	if err := rd2.Resume(pos); err != nil {
		t.Fatal(err)
	}
	again := next(t, rd2)
	if describe(again) != describe(rest) || again.Prev != 245 {
		t.Fatalf("resumed cut\n got %s\nwant %s", describe(again), describe(rest))
	}
	want(t, again, "300 250/5:a.u3,b.c5 260/6:a.u1,b.c6 270/7:a.u2,b.c7 280/8:a.u3,b.c8 290/9:a.u1,b.c9")
	if _, err := ParsePosition([]byte(`{"version":9}`)); err == nil {
		t.Fatal("a position of an unknown version parsed")
	}
}

// TestJoinAtHydratedWatermark: a table joins at a cut no lower than the watermark it was
// hydrated at, even when the other tables' watermarks step below it: a chunked copy's rows
// carry their chunk's position, so a lower cut could show them without the other tables'
// changes they reflect.
func TestJoinAtHydratedWatermark(t *testing.T) {
	f := newFake(t, 2, codec.FormatJSON)
	a, b := f.table("a"), f.table("b")
	f.step(func() { f.mark(a, hydrated, 100, 1, nil) })
	rd := f.reader(nil, false)
	want(t, next(t, rd), "100 joined:a")
	f.insert(a, 120, 3, 0, 1, "x")
	f.copyRows(b, 180, 1, 7) // a chunk's row at 179 that reflects the transaction at 120
	f.step(func() {
		f.mark(a, hydrated, 150, 1, nil)
		f.mark(b, hydrated, 200, 1, nil)
	})
	want(t, next(t, rd), "150 120/3:a.c1")
	f.insert(a, 210, 4, 0, 2, "y")
	f.step(func() { f.mark(a, hydrated, 250, 1, nil) })
	f.step(func() { f.mark(b, hydrated, 250, 1, nil) })
	// b joins at the first cut at or above 200 once its load is read: 200 when it was read
	// before a's cut at 250 was due, else 250 (with a's change, or after it); a's change comes
	// once.
	var got []string
	for len(got) == 0 || !strings.Contains(got[len(got)-1], "joined:b") {
		got = append(got, describe(next(t, rd)))
	}
	switch g := strings.Join(got, "|"); g {
	case "200 joined:b 179/0:b.r7", "250 joined:b 179/0:b.r7 210/4:a.c2", "250 210/4:a.c2|250 joined:b 179/0:b.r7":
	default:
		t.Fatalf("cuts %s", g)
	}
}

// TestMemoryBounded: while a slow table holds the cuts back, a busy table's records past the
// cut are read only up to Config.HeldBytes per partition (plus a fetch); the rest stays in
// Kafka, and comes once the slow table moves.
func TestMemoryBounded(t *testing.T) {
	f := newFake(t, 2, codec.FormatJSON)
	busy, slow := f.table("busy"), f.table("slow")
	f.step(func() {
		f.mark(busy, hydrated, 100, 1, nil)
		f.mark(slow, hydrated, 100, 1, nil)
	})
	const held, fetch = 32 << 10, 16 << 10
	rd, err := New(Config{Brokers: f.brokers, WatermarkTopic: f.wmTopic, HeldBytes: held,
		Opts: []kgo.Opt{kgo.FetchMaxPartitionBytes(fetch), kgo.FetchMaxBytes(fetch)}})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	want(t, next(t, rd), "100 joined:busy joined:slow")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		pad := make([]byte, 250) // incompressible: fetch sizes count compressed batches
		for j := range pad {
			pad[j] = byte(rng.IntN(256))
		}
		f.insert(busy, change.LSN(200+i), uint32(i), 0, i, hex.EncodeToString(pad))
		if i%20 == 19 {
			f.flushTracked() // batches of ~10 KiB per partition: a fetch returns whole batches
		}
		if i%200 == 199 {
			f.step(func() { f.mark(busy, hydrated, change.LSN(201+i), 1, nil) })
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c, err := rd.Next(ctx); err == nil {
		t.Fatalf("a cut while slow holds at 100: %s", describe(c))
	}
	total := 0
	for _, pt := range rd.st.tables[busy].parts {
		if pt.heldBytes > held+2*fetch+16<<10 {
			t.Fatalf("partition %d holds %d bytes, want at most about %d (plus a fetch)", pt.p, pt.heldBytes, held)
		}
		total += len(pt.held)
	}
	if total == 0 || total >= 2000 {
		t.Fatalf("%d records held of 2000 written: want some, not all", total)
	}
	f.step(func() { f.mark(slow, hydrated, 3000, 1, nil) })
	n := 0
	for n < 2000 {
		n += next(t, rd).Changes()
	}
	if n != 2000 {
		t.Fatalf("%d changes delivered, want 2000", n)
	}
}

// TestResumeAcrossLifecycle: a reader resumed from a stored position learns from the watermark
// topic what happened since: a table removed meanwhile leaves with its event after its last
// changes, and a table copied again meanwhile is reset and joins again with its new copy; the
// cuts wait for it in between.
func TestResumeAcrossLifecycle(t *testing.T) {
	f := newFake(t, 2, codec.FormatJSON)
	a, b, c := f.table("a"), f.table("b"), f.table("c")
	f.copyRows(c, 100, 1, 1)
	f.step(func() {
		f.mark(a, hydrated, 100, 1, nil)
		f.mark(b, hydrated, 100, 1, nil)
		f.mark(c, hydrated, 100, 1, nil)
	})
	rd := f.reader(nil, false)
	want(t, next(t, rd), "100 joined:a joined:b joined:c 99/0:c.r1")
	stored, err := json.Marshal(rd.st.position())
	if err != nil {
		t.Fatal(err)
	}
	f.insert(b, 150, 4, 0, 9, "last")
	f.flushTracked()
	start := f.offsets(c)
	f.copyRows(c, 170, 2, 2)
	f.step(func() {
		f.mark(b, watermark.StateRemoved, 160, 1, nil)
		f.mark(c, hydrated, 180, 2, start)
		f.mark(a, hydrated, 200, 1, nil)
	})
	pos, err := ParsePosition(stored)
	if err != nil {
		t.Fatal(err)
	}
	rd2 := f.reader(nil, false)
	if err := rd2.Resume(pos); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) == 0 || !strings.Contains(got[len(got)-1], "joined:c") {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		c, err := rd2.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%v %s\n%s", got, err, rd2.st.dump())
		}
		got = append(got, describe(c))
		if len(got) > 5 {
			break
		}
	}
	// c's reset comes at once; the cuts then wait for c's new copy, so b's removal comes with it.
	if w := "100 reset:c|180 joined:c removed:b 150/4:b.c9 169/0:c.r2"; strings.Join(got, "|") != w {
		t.Fatalf("cuts after resume\n got %s\nwant %s", strings.Join(got, "|"), w)
	}
}

// TestResumeReadsJoinedCopyAgain: a resumed reader reads the watermark topic from its start, so
// it reads again the hydrating record of the copy its tables joined with. That record is
// history: the tables stay joined, and the resumed reader delivers only what followed the
// position (the bank test's applier, resumed after a SIGKILL, re-applied both tables whole
// when it was taken as a new copy). A copy of the same attempt number that begins past the
// position (an export removed and added again) still resets the table.
func TestResumeReadsJoinedCopyAgain(t *testing.T) {
	f := newFake(t, 2, codec.FormatJSON)
	a, b := f.table("a"), f.table("b")
	startA, startB := f.offsets(a), f.offsets(b)
	f.step(func() {
		f.mark(a, hydrating, 0, 1, startA)
		f.mark(b, hydrating, 0, 1, startB)
	})
	f.copyRows(a, 100, 1, 1, 2)
	f.copyRows(b, 100, 1, 3)
	f.step(func() {
		f.mark(a, hydrated, 100, 1, startA)
		f.mark(b, hydrated, 100, 1, startB)
	})
	rd := f.reader(nil, true)
	want(t, next(t, rd), "100 joined:a joined:b 99/0:a.r1,b.r3,a.r2")
	stored, err := json.Marshal(rd.st.position())
	if err != nil {
		t.Fatal(err)
	}
	f.insert(a, 150, 4, 0, 9, "x")
	f.insert(b, 150, 4, 1, 8, "y")
	f.flushTracked()
	f.step(func() {
		f.mark(a, hydrated, 200, 1, startA)
		f.mark(b, hydrated, 200, 1, startB)
	})
	pos, err := ParsePosition(stored)
	if err != nil {
		t.Fatal(err)
	}
	rd2 := f.reader(nil, true)
	if err := rd2.Resume(pos); err != nil {
		t.Fatal(err)
	}
	want(t, next(t, rd2), "200 150/4:a.c9,b.c8")

	// b copied again under the same attempt number, its copy beginning past the position.
	stored, err = json.Marshal(rd2.st.position())
	if err != nil {
		t.Fatal(err)
	}
	f.insert(b, 250, 5, 0, 6, "z")
	f.flushTracked()
	again := f.offsets(b)
	f.step(func() { f.mark(b, hydrating, 0, 1, again) })
	f.copyRows(b, 300, 1, 7)
	f.step(func() {
		f.mark(b, hydrated, 300, 1, again)
		f.mark(a, hydrated, 300, 1, startA)
	})
	pos, err = ParsePosition(stored)
	if err != nil {
		t.Fatal(err)
	}
	rd3 := f.reader(nil, true)
	if err := rd3.Resume(pos); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) == 0 || !strings.Contains(got[len(got)-1], "joined:b") {
		got = append(got, describe(next(t, rd3)))
		if len(got) > 4 {
			break
		}
	}
	if !strings.Contains(strings.Join(got, "|"), "reset:b") || !strings.Contains(got[len(got)-1], "b.r7") {
		t.Fatalf("cuts after b was copied again past the position: %s", strings.Join(got, "|"))
	}
}
