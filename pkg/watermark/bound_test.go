package watermark

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

// valueOf returns a function that takes what an encoder returns and fails t on its error.
func valueOf(t testing.TB) func([]byte, error) []byte {
	return func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestTopicReaderBound(t *testing.T) {
	const bound = change.LSN(1000)
	mustValue := valueOf(t)
	hydrated := func(w *change.LSN, pos change.LSN, snap *SnapshotInfo) []byte {
		return mustValue(Encode(Record{Export: exA, Topic: "p.a", State: StateHydrated, Mode: ModeIndependent,
			Watermark: w, Position: pos, Offsets: map[int32]int64{0: 5}, Snapshot: snap, Time: trackerT0}))
	}
	quiet := func(w *change.LSN, pos change.LSN) []byte {
		return mustValue(EncodeQuiet(Quiet{Mode: ModeIndependent, Watermark: w, Position: pos, Time: trackerT0}))
	}
	for _, tc := range []struct {
		name  string
		value []byte
		field string // "" when the value is taken
	}{
		{"own record at the bound", hydrated(lsnp(bound), bound, &SnapshotInfo{Attempt: 1, ConsistentPoint: bound}), ""},
		{"own record without a watermark", hydrated(nil, 0, nil), ""},
		{"own watermark past", hydrated(lsnp(bound+1), 900, nil), "public.a's watermark"},
		{"own position past", hydrated(lsnp(900), bound+1, nil), "public.a's position"},
		{"consistent point past", hydrated(lsnp(900), 900, &SnapshotInfo{Attempt: 1, ConsistentPoint: 0xFFFFFFFFFFFFFF00}), "public.a's snapshot consistent point"},
		{"quiet record at the bound", quiet(lsnp(bound), bound), ""},
		{"quiet record without a watermark", quiet(nil, 0), ""},
		{"quiet watermark past", quiet(lsnp(0xFFFFFFFFFFFFFF00), 900), "the quiet record's watermark"},
		{"quiet position past", quiet(lsnp(900), bound+1), "the quiet record's position"},
		{"checkpoint at the bound", mustValue(EncodeCheckpoint(bound, nil, trackerT0)), ""},
		{"checkpoint past", mustValue(EncodeCheckpoint(bound+1, nil, trackerT0)), "the checkpoint's position"},
		{"partly published transaction past", mustValue(EncodeCheckpoint(900, &change.Partial{Commit: bound + 1, Changes: 3}, trackerT0)),
			"the checkpoint's partly published transaction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What the reader holds before: a hydrated export at 800 and a checkpoint.
			before := [][]byte{hydrated(lsnp(800), 800, nil), mustValue(EncodeCheckpoint(800, nil, trackerT0))}
			rd := NewTopicReader()
			rd.Bound(bound)
			for _, v := range before {
				if err := rd.Add(0, v); err != nil {
					t.Fatal(err)
				}
			}
			err := rd.Add(0, tc.value)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused a value within the bound: %v", err)
				}
				return
			}
			past, ok := errors.AsType[*PastBoundError](err)
			if !ok {
				t.Fatalf("err = %v, want a *PastBoundError", err)
			}
			if past.Field != tc.field || past.LSN <= bound || past.Bound != bound {
				t.Errorf("refused %+v, want field %q past %s", *past, tc.field, bound)
			}
			// A refused value changes nothing.
			want := NewTopicReader()
			for _, v := range before {
				if err := want.Add(0, v); err != nil {
					t.Fatal(err)
				}
			}
			gotRecs, gotCP := rd.Result()
			wantRecs, wantCP := want.Result()
			if !reflect.DeepEqual(gotRecs, wantRecs) || !reflect.DeepEqual(gotCP, wantCP) {
				t.Errorf("a refused value changed the result:\n got %+v %+v\nwant %+v %+v", gotRecs, gotCP, wantRecs, wantCP)
			}
			// Raised past it, the bound takes the value.
			rd.Bound(past.LSN)
			if err := rd.Add(0, tc.value); err != nil {
				t.Errorf("refused again under a bound at its value: %v", err)
			}
		})
	}
}

// TestTopicReaderBoundSupersededQuiet: a forged quiet record that a later quiet record
// supersedes still sets the watermark that a restart takes up (never backwards), so every value
// is checked as it is read, not only what the fold keeps.
func TestTopicReaderBoundSupersededQuiet(t *testing.T) {
	forged := change.LSN(0xFFFFFFFFFFFFFF00)
	mustValue := valueOf(t)
	values := [][]byte{
		mustValue(Encode(Record{Export: exA, Topic: "p.a", State: StateHydrated, Mode: ModeIndependent,
			Watermark: lsnp(800), Position: 800, Offsets: map[int32]int64{0: 5}, Time: trackerT0})),
		mustValue(EncodeQuiet(Quiet{Mode: ModeIndependent, Watermark: &forged, Position: 800, Time: trackerT0})),
		mustValue(EncodeQuiet(Quiet{Mode: ModeIndependent, Watermark: lsnp(900), Position: 900, Time: trackerT0})),
	}
	unchecked := NewTopicReader()
	for _, v := range values {
		if err := unchecked.Add(0, v); err != nil {
			t.Fatal(err)
		}
	}
	if recs, _ := unchecked.Result(); len(recs) != 1 || recs[0].Watermark == nil || *recs[0].Watermark != forged {
		t.Fatalf("without a bound the restart takes up the forged watermark through the later record: %+v", recs)
	}
	rd := NewTopicReader()
	rd.Bound(1000)
	var err error
	for i, v := range values {
		if err = rd.Add(0, v); err != nil {
			if i != 1 {
				t.Fatalf("value %d refused, want value 1: %v", i, err)
			}
			break
		}
	}
	if _, ok := errors.AsType[*PastBoundError](err); !ok {
		t.Fatalf("err = %v, want the forged quiet record refused", err)
	}
}
