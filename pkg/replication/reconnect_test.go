package replication

import (
	"os"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

// TestStreamReconnectSkipsHandledTransactions: after a cut, the server sends again what follows
// the slot's confirmed position, including transactions handled on the old connection and the
// one that was open when it broke. Each must be published or held exactly once.
func TestStreamReconnectSkipsHandledTransactions(t *testing.T) {
	st, out := newTestStream(t, 0)
	st.setConsistentPoint([]change.ExportID{tB}, 0x50)
	feed(t, st,
		begin(0x100, 1), insert(1, "1", "a1"), insert(2, "10", "b1"), commit(0x100, 0x108),
		begin(0x200, 2), insert(1, "2", "a2"), commit(0x200, 0x208),
		// Open when the connection breaks: never committed on this connection.
		begin(0x300, 3), insert(1, "3", "a3"), insert(2, "30", "b3"),
	)
	st.reconnected()
	// The server replays from an older confirmed position: Relation messages first, then the
	// same transactions, then new ones.
	feed(t, st,
		relationMsg(1, "public", "a"), relationMsg(2, "public", "b"),
		begin(0x100, 1), insert(1, "1", "a1"), insert(2, "10", "b1"), commit(0x100, 0x108),
		begin(0x200, 2), insert(1, "2", "a2"), commit(0x200, 0x208),
		begin(0x300, 3), insert(1, "3", "a3"), insert(2, "30", "b3"), commit(0x300, 0x308),
		begin(0x400, 4), insert(1, "4", "a4"), commit(0x400, 0x408),
	)
	var ids []string
	for _, u := range drain(out) {
		if u.Kind != change.KindTxn {
			continue
		}
		for _, r := range u.Records {
			ids = append(ids, afterID(t, r))
		}
	}
	want := []string{"1", "2", "3", "4"}
	if len(ids) != len(want) {
		t.Fatalf("published %v, want %v (each once)", ids, want)
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("published %v, want %v", ids, want)
		}
	}
	if n := st.routes[tB].hold.Len(); n != 2 {
		t.Fatalf("b holds %d transactions, want 2 (0/100 and 0/300, each once)", n)
	}
	if st.pos != 0x408 {
		t.Fatalf("stream position %s, want 0/408", st.pos)
	}
}

// TestSetConsistentPointReportsBrokenSpill: held changes that cannot be read back are not
// dropped silently; the export holds everything again and the caller learns it must restart it.
func TestSetConsistentPointReportsBrokenSpill(t *testing.T) {
	st, _ := newTestStream(t, 0)
	st.routes[tB].hold = newHoldBuffer(1, t.TempDir()) // everything spills
	feed(t, st,
		begin(0x100, 1), insert(2, "10", "b1"), commit(0x100, 0x108),
		begin(0x200, 2), insert(2, "20", "b2"), commit(0x200, 0x208),
	)
	h := st.routes[tB].hold
	if h.file == nil {
		t.Fatal("test premise: the hold buffer should have spilled")
	}
	if err := h.w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(h.file.Name(), 5); err != nil {
		t.Fatal(err)
	}
	if err := st.setConsistentPoint([]change.ExportID{tB}, 0x150); err == nil {
		t.Fatal("setConsistentPoint over a broken spill file returned no error")
	}
	r := st.routes[tB]
	if r.hasC || r.hold == nil || r.mode != routeHold {
		t.Fatalf("after the error: hasC %v, hold %v, state %v; want holding without a consistent point", r.hasC, r.hold != nil, r.mode)
	}
}

// TestControlKeepsOrder: commands run in the order they were posted, a command whose outcome
// the owner waits for (SetConsistentPoint) included, and no goroutine is left behind.
func TestControlKeepsOrder(t *testing.T) {
	s := New(Config{SpillDir: t.TempDir()}, fakeHooks{})
	var got []int
	for i := range 200 {
		s.post(func(*streamState) { got = append(got, i) })
	}
	done := s.SetConsistentPoint(nil, 0x100)
	s.post(func(*streamState) { got = append(got, 200) })
	// The stream goroutine's part.
	for len(got) < 201 {
		<-s.ctrlSig
		s.state.control()
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("SetConsistentPoint applied, but its outcome is not there")
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("control call %d ran as %d: order lost", v, i)
		}
	}
}
