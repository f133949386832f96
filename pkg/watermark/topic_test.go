package watermark

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// randomTopicValue is a random value of the watermark topic over the exports es: an export's own
// record (any state), a quiet record (some exports busy), a checkpoint or a tombstone.
func randomTopicValue(t testing.TB, rng *rand.Rand, es []change.ExportID, i int) []byte {
	t.Helper()
	at := trackerT0.Add(time.Duration(i) * time.Millisecond)
	w := change.LSN(rng.IntN(1000) + 1)
	var b []byte
	var err error
	switch k := rng.IntN(20); {
	case k < 12:
		e := es[rng.IntN(len(es))]
		states := []State{StateHydrated, StateHydrated, StateHydrating, StateRemoved, StateFailed}
		r := Record{Export: e, Topic: "t." + e.Table, State: states[rng.IntN(len(states))], Mode: ModeIndependent,
			Position: w, Offsets: map[int32]int64{0: int64(i)}, Time: at}
		if r.State == StateHydrated || rng.IntN(2) == 0 {
			r.Watermark = &w
		}
		b, err = Encode(r)
	case k < 17:
		var busy []change.ExportID
		for _, e := range es {
			if rng.IntN(3) == 0 {
				busy = append(busy, e)
			}
		}
		b, err = EncodeQuiet(Quiet{Mode: ModeIndependent, Watermark: &w, Position: w, Busy: busy, Time: at})
	case k < 19:
		b, err = EncodeCheckpoint(w, nil, at)
	default:
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeEverything is how the restart read the topic before TopicReader: every value of every
// partition, partition after partition, through one View, keeping every record; the records
// that mattered were each export's last, ordered by its offset.
func decodeEverything(t testing.TB, parts map[int32][][]byte) ([]Record, *Checkpoint) {
	t.Helper()
	view := NewView()
	var all []Record
	var cp *Checkpoint
	for _, p := range slices.Sorted(func(yield func(int32) bool) {
		for p := range parts {
			if !yield(p) {
				return
			}
		}
	}) {
		for _, v := range parts[p] {
			if v == nil {
				continue
			}
			if c, ok, err := DecodeCheckpoint(v); ok {
				if err != nil {
					t.Fatal(err)
				}
				cp = &c
				continue
			}
			if _, err := view.Add(v); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := DecodeQuiet(v); ok {
				continue
			}
			r, err := Decode(v)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, r)
		}
	}
	var out []Record
	for i, r := range all {
		if !slices.ContainsFunc(all[i+1:], func(o Record) bool { return o.Export == r.Export }) {
			eff, _ := view.Get(r.Export)
			out = append(out, eff)
		}
	}
	return out, cp
}

// TestTopicReaderKeepsLatest: whatever the sequence of own, quiet and checkpoint records (one
// partition, or several as a hand-made topic may have), TopicReader gives the restart the same
// records and checkpoint as reading and keeping everything did, and it holds at most one record
// per export, plus a quiet record and a checkpoint, per partition.
func TestTopicReaderKeepsLatest(t *testing.T) {
	for seed := range uint64(150) {
		rng := rand.New(rand.NewPCG(seed, 17))
		es := make([]change.ExportID, 1+rng.IntN(6))
		for i := range es {
			es[i] = change.ExportID{Schema: "public", Table: fmt.Sprintf("t%d", i)}
		}
		nparts := int32(1)
		if seed%4 == 3 {
			nparts = 3
		}
		parts := make(map[int32][][]byte)
		rd := NewTopicReader()
		n := rng.IntN(200)
		for i := range n {
			p := rng.Int32N(nparts)
			v := randomTopicValue(t, rng, es, i)
			parts[p] = append(parts[p], v)
			if err := rd.Add(p, v); err != nil {
				t.Fatalf("seed %d: Add: %v", seed, err)
			}
			if got, most := rd.Retained(), int(nparts)*(len(es)+2); got > most {
				t.Fatalf("seed %d: %d values retained after %d, want at most %d", seed, got, i+1, most)
			}
		}
		gotRecs, gotCP := rd.Result()
		wantRecs, wantCP := decodeEverything(t, parts)
		if nparts > 1 {
			// Several partitions have no order across them: the never-backwards rule (peaks)
			// holds within each, so the watermarks may differ from one replay order's; the
			// rest must not.
			for _, rs := range [][]Record{gotRecs, wantRecs} {
				for i := range rs {
					rs[i].Watermark, rs[i].WatermarkLSN = nil, nil
				}
			}
		}
		if !reflect.DeepEqual(gotRecs, wantRecs) && !(len(gotRecs) == 0 && len(wantRecs) == 0) {
			t.Fatalf("seed %d (%d values, %d partitions): records\n%+v\nwant\n%+v", seed, n, nparts, gotRecs, wantRecs)
		}
		if !reflect.DeepEqual(gotCP, wantCP) {
			t.Fatalf("seed %d: checkpoint %+v, want %+v", seed, gotCP, wantCP)
		}
	}
}

// TestTopicReaderMemory: 20,000 values for 5 exports leave 7 decoded values in the reader (each
// export's latest, the quiet record, the checkpoint), not 20,000.
func TestTopicReaderMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	es := make([]change.ExportID, 5)
	for i := range es {
		es[i] = change.ExportID{Schema: "public", Table: fmt.Sprintf("t%d", i)}
	}
	rd := NewTopicReader()
	const n = 20_000
	for i := range n {
		if err := rd.Add(0, randomTopicValue(t, rng, es, i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := rd.Retained(); got != len(es)+2 {
		t.Fatalf("%d values retained after %d for %d exports, want %d", got, n, len(es), len(es)+2)
	}
	if recs, cp := rd.Result(); len(recs) != len(es) || cp == nil {
		t.Fatalf("result: %d records and checkpoint %v, want %d and one", len(recs), cp, len(es))
	}
}

// TestTopicReaderRefuses: a value that is not one of the topic's records is an error, also when
// a later value supersedes it (as when the restart decoded everything).
func TestTopicReaderRefuses(t *testing.T) {
	good, err := Encode(Record{Export: exA, Topic: "t.a", State: StateHydrated, Time: trackerT0})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, value string }{
		{"not JSON", `{"version":1,"export":`},
		{"a number where an object is", `{"version":1,"export":"public.a","state":"hydrated","offsets":{"0":1e400}}`},
		{"a partition that is not a number", `{"version":1,"export":"public.a","state":"hydrated","offsets":{"zero":1}}`},
		{"watermark and watermark_lsn disagree", `{"version":1,"export":"public.a","state":"hydrated","watermark":"0/10","watermark_lsn":17}`},
		{"unknown state", `{"version":1,"export":"public.a","state":"sleeping"}`},
		{"quiet record of a newer version", `{"version":99,"kind":"quiet"}`},
		{"checkpoint whose numbers disagree", `{"version":1,"kind":"checkpoint","position":"0/10","position_lsn":99}`},
		{"busy list that is not a list", `{"version":1,"kind":"quiet","busy":{"schema":"public"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := NewTopicReader()
			err := rd.Add(0, []byte(tc.value))
			if err == nil {
				t.Fatalf("Add(%s) = nil, want an error", tc.value)
			}
			t.Log(err)
			if err := rd.Add(0, good); err != nil {
				t.Fatalf("a good value after the bad one: %v", err)
			}
		})
	}
}
