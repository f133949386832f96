package replication

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// newPieceStream is newTestStream with a piece bound of one byte (every change closes a piece)
// and inFlight pieces in flight.
func newPieceStream(t *testing.T, inFlight int, partial change.Partial) (*streamState, chan *change.Unit) {
	t.Helper()
	s := New(Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true}, SpillDir: t.TempDir(), HoldMemory: 1 << 20,
		PieceBytes: 1, PiecesInFlight: inFlight}, fakeHooks{})
	s.Resume(map[change.ExportID]change.LSN{tA: 0})
	s.ResumePartial(partial)
	out := make(chan *change.Unit, 1000)
	st := s.state
	st.ctx, st.out = t.Context(), out
	st.detect([]change.ExportID{tB})
	st.setConsistentPoint([]change.ExportID{tB}, 0x50)
	feed(t, st, relationMsg(1, "public", "a"), relationMsg(2, "public", "b"))
	return st, out
}

// published returns the ids of the records of KindTxn units, releasing each unit's slot as the
// sink would once it is durable.
func published(t *testing.T, units []*change.Unit) []string {
	t.Helper()
	var ids []string
	for _, u := range units {
		if u.Kind != change.KindTxn {
			continue
		}
		for _, r := range u.Records {
			ids = append(ids, afterID(t, r))
		}
		u.Claim.Return()
	}
	return ids
}

func heldIDs(t *testing.T, st *streamState) []string {
	t.Helper()
	var ids []string
	if err := st.routes[tB].hold.Drain(func(u *change.Unit) error {
		for _, r := range u.Records {
			ids = append(ids, afterID(t, r))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestStreamPieces: a transaction past the piece bound reaches the sink in pieces before its
// Commit, numbered in order, each naming the changes it covers; only the last one ends the
// transaction (sets End and moves the stream position). Held changes go to the hold buffer in
// pieces too.
func TestStreamPieces(t *testing.T) {
	st, out := newPieceStream(t, 1<<20, change.Partial{})
	feed(t, st, begin(0x300, 7), insert(1, "1", "x"), insert(2, "10", "y"), insert(1, "2", "z"))
	units := drain(out)
	if len(units) != 2 {
		t.Fatalf("%d units before the commit, want 2 pieces", len(units))
	}
	for i, u := range units {
		// The hold-only change (b's) went to the hold buffer without a piece of its own.
		if u.Piece == nil || u.Piece.Index != i || u.Piece.Last || u.End != 0 || u.Commit != 0x300 || u.Claim == nil {
			t.Fatalf("piece %d = %+v (piece %+v), want index %d, not last, no end, commit 0/300", i, u, u.Piece, i)
		}
	}
	if units[0].Piece.Changes != 1 || units[1].Piece.Changes != 3 {
		t.Fatalf("pieces cover %d and %d changes, want 1 and 3", units[0].Piece.Changes, units[1].Piece.Changes)
	}
	if st.pos != 0 {
		t.Fatalf("stream position %s moved before the commit", st.pos)
	}
	feed(t, st, commit(0x300, 0x308))
	units = append(units, drain(out)...)
	last := units[len(units)-1]
	if last.Piece == nil || !last.Piece.Last || last.End != 0x308 || last.Piece.Changes != 3 {
		t.Fatalf("last unit %+v (piece %+v), want the last piece ending at 0/308 covering 3 changes", last, last.Piece)
	}
	if got := published(t, units); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("published %v, want [1 2]", got)
	}
	if got := heldIDs(t, st); !slices.Equal(got, []string{"10"}) {
		t.Fatalf("held %v, want [10]", got)
	}
	if st.pos != 0x308 || st.partial != (change.Partial{}) {
		t.Fatalf("after the commit: position %s, partial %+v", st.pos, st.partial)
	}
	// A small transaction after it is one whole unit again.
	feed(t, st, begin(0x400, 8), commit(0x400, 0x408))
	if us := drain(out); len(us) != 0 {
		t.Fatalf("an empty transaction emitted %d units", len(us))
	}
}

// TestStreamPiecesReconnect: a connection cut in the middle of a transaction published in
// pieces; the server sends it again whole. The changes handed over before the cut are skipped,
// so each row is published, or held, exactly once.
func TestStreamPiecesReconnect(t *testing.T) {
	st, out := newPieceStream(t, 1<<20, change.Partial{})
	txn := [][]byte{begin(0x300, 7), insert(1, "1", "a"), insert(2, "10", "b"), insert(1, "2", "c"), insert(2, "11", "d"), insert(1, "3", "e")}
	feed(t, st, txn[:4]...) // three changes handed over, then the cut
	st.reconnected()
	feed(t, st, relationMsg(1, "public", "a"), relationMsg(2, "public", "b"))
	feed(t, st, txn...)
	feed(t, st, commit(0x300, 0x308))
	units := drain(out)
	if got := published(t, units); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("published %v, want [1 2 3], each once", got)
	}
	if got := heldIDs(t, st); !slices.Equal(got, []string{"10", "11"}) {
		t.Fatalf("held %v, want [10 11], each once", got)
	}
	// Numbered from 0 again when the server sends the transaction again; what they cover only
	// grows (the last piece may be empty).
	var changes int64
	for i, u := range units {
		if u.Piece == nil || u.Piece.Changes < changes {
			t.Fatalf("unit %d has piece %+v after one covering %d changes", i, u.Piece, changes)
		}
		changes = u.Piece.Changes
	}
	if !units[len(units)-1].Piece.Last || units[len(units)-1].Piece.Changes != 5 {
		t.Fatalf("last piece %+v, want last covering 5 changes", units[len(units)-1].Piece)
	}
}

// TestStreamPiecesResumePartial: after a restart that found the first changes of a transaction
// durable (the checkpoint's partial), they are skipped; a transaction with nothing left still
// ends with an (empty) last piece, which completes it for the watermarks.
func TestStreamPiecesResumePartial(t *testing.T) {
	st, out := newPieceStream(t, 1<<20, change.Partial{Commit: 0x300, Changes: 2})
	feed(t, st, begin(0x200, 6), insert(1, "0", "before"), commit(0x200, 0x208))
	feed(t, st, begin(0x300, 7), insert(1, "1", "a"), insert(1, "2", "b"), insert(1, "3", "c"), commit(0x300, 0x308))
	if got := published(t, drain(out)); !slices.Equal(got, []string{"0", "3"}) {
		t.Fatalf("published %v, want [0 3]: the two durable changes of 0/300 skipped", got)
	}

	st, out = newPieceStream(t, 1<<20, change.Partial{Commit: 0x300, Changes: 2})
	feed(t, st, begin(0x300, 7), insert(1, "1", "a"), insert(1, "2", "b"), commit(0x300, 0x308))
	units := drain(out)
	if len(units) != 1 || units[0].Piece == nil || !units[0].Piece.Last || len(units[0].Records) != 0 || units[0].End != 0x308 {
		t.Fatalf("units %v, want one empty last piece ending at 0/308", kinds(units))
	}
}

// TestStreamPiecesInFlight: the stage waits while the pieces and transactions not yet durable
// fill its in-flight budget, so a transaction of any size, or many, hold a bounded amount of
// memory.
func TestStreamPiecesInFlight(t *testing.T) {
	// A budget of 2 × 1 byte: each piece (a record of about 200 bytes) goes alone.
	st, out := newPieceStream(t, 2, change.Partial{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		feed(t, st, begin(0x300, 7), insert(1, "1", "a"), insert(1, "2", "b"), insert(1, "3", "c"), commit(0x300, 0x308))
	}()
	var got []*change.Unit
	for i := range 3 {
		time.Sleep(50 * time.Millisecond)
		if n := len(out); n != 1 {
			t.Fatalf("step %d: %d pieces handed over while none is durable, want 1", i, n)
		}
		if used := st.s.inFlight.InUse(); used <= 0 {
			t.Fatalf("step %d: budget in use %d", i, used)
		}
		u := <-out
		got = append(got, u)
		u.Claim.Return()
	}
	<-done
	rest := drain(out)
	if len(rest) != 1 || !rest[0].Piece.Last || len(got[0].Records) != 1 {
		t.Fatalf("after releases: %d more units, want the (empty) last piece", len(rest))
	}
	rest[0].Claim.Return()
	if used := st.s.inFlight.InUse(); used != 0 {
		t.Fatalf("budget in use %d after every unit was released", used)
	}
}

// TestStreamPiecesPartialNeverSent: a transaction restored as partly published that the server
// does not send again (pgoutput skips a transaction none of whose changes are published any
// more) is closed once the stream passes it, with an empty last piece, so watermarks go on.
func TestStreamPiecesPartialNeverSent(t *testing.T) {
	st, out := newPieceStream(t, 1<<20, change.Partial{Commit: 0x300, Changes: 2})
	feed(t, st, keepalive(0x200))
	if err := st.yield(); err != nil {
		t.Fatal(err)
	}
	for _, u := range drain(out) {
		if u.Piece != nil {
			t.Fatalf("closed the partial transaction at 0/300 while the stream was at 0/200")
		}
	}
	feed(t, st, keepalive(0x400))
	if err := st.yield(); err != nil {
		t.Fatal(err)
	}
	units := drain(out)
	if len(units) == 0 || units[0].Piece == nil || !units[0].Piece.Last || units[0].Commit != 0x300 || units[0].End != 0x400 {
		t.Fatalf("units %v, want an empty last piece of 0/300 ending at 0/400", kinds(units))
	}
	if st.partial != (change.Partial{}) {
		t.Fatalf("partial %+v still set", st.partial)
	}
}

// TestStreamPiecesHeldSpill: a large transaction of a table being copied (its changes held
// until the copy is done) goes to the hold buffer piece by piece, which spills to a file past
// its memory bound; released, every change comes back once, in order.
func TestStreamPiecesHeldSpill(t *testing.T) {
	s := New(Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true}, SpillDir: t.TempDir(), HoldMemory: 64 << 10,
		PieceBytes: 16 << 10}, fakeHooks{})
	out := make(chan *change.Unit, 1000)
	st := s.state
	st.ctx, st.out = t.Context(), out
	st.detect([]change.ExportID{tB})
	st.setConsistentPoint([]change.ExportID{tB}, 0x50)
	feed(t, st, relationMsg(2, "public", "b"), begin(0x300, 7))
	const rows = 2000
	pad := strings.Repeat("x", 200)
	for i := range rows {
		feed(t, st, insert(2, strconv.Itoa(i), pad))
	}
	h := st.routes[tB].hold
	if h.file == nil || h.Len() < 2 {
		t.Fatalf("hold buffer: %d units, spilled %v; want pieces spilled to a file before the commit", h.Len(), h.file != nil)
	}
	feed(t, st, commit(0x300, 0x308))
	ids := heldIDs(t, st)
	if len(ids) != rows {
		t.Fatalf("%d held changes released, want %d", len(ids), rows)
	}
	for i, id := range ids {
		if id != strconv.Itoa(i) {
			t.Fatalf("held change %d is id %s", i, id)
		}
	}
	if us := drain(out); len(us) != 0 {
		t.Fatalf("%d units published for a table being copied", len(us))
	}
}
