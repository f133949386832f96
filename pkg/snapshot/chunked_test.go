package snapshot

import (
	"slices"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

func TestChunkShare(t *testing.T) {
	for _, tc := range []struct {
		read, bytes, chunkRows int
		want                   int64
	}{
		{10, 500, maxChunkRows, 1},                     // a 10-row table's only chunk
		{0, 64, maxChunkRows, 1},                       // an empty table: at least one share
		{maxChunkRows, 1000, maxChunkRows, slotShares}, // a full chunk by rows
		{maxChunkRows / 2, 1000, maxChunkRows, slotShares / 2},
		{10, 2 * chunkBytes, maxChunkRows, slotShares}, // few rows, but wide: by bytes
		{10, 4 * chunkBytes, maxChunkRows, slotShares}, // never more than a full chunk
		{1, chunkBytes / 32, 0, slotShares / 64},       // no row count: by bytes alone
	} {
		if got := chunkShare(tc.read, tc.bytes, tc.chunkRows); got != tc.want {
			t.Errorf("chunkShare(%d, %d, %d) = %d, want %d", tc.read, tc.bytes, tc.chunkRows, got, tc.want)
		}
	}
}

// TestChunkRecordsOwnSize: a chunk hands over its rows in a slice of their own size, not in the
// worker's buffer with room for a full chunk, and the buffer keeps no reference to them.
func TestChunkRecordsOwnSize(t *testing.T) {
	w := &chunkWorker{}
	buf := w.scratch(maxChunkRows)
	if cap(buf) < maxChunkRows || len(buf) != 0 {
		t.Fatalf("scratch: len %d cap %d, want empty with room for %d", len(buf), cap(buf), maxChunkRows)
	}
	for i := range 10 {
		buf = append(buf, change.Record{Topic: "t", Key: []byte{byte(i)}})
	}
	rows := w.release(buf)
	if len(rows) != 10 || cap(rows) >= 100 {
		t.Errorf("released: len %d cap %d, want 10 rows in a slice of about their size", len(rows), cap(rows))
	}
	for i, r := range rows {
		if r.Topic != "t" || len(r.Key) != 1 || r.Key[0] != byte(i) {
			t.Errorf("row %d = %+v", i, r)
		}
	}
	if again := w.scratch(maxChunkRows); &again[:1][0] != &buf[:1][0] {
		t.Error("the worker's buffer was not kept for the next chunk")
	}
	for i, r := range buf[:10] {
		if r.Topic != "" || r.Key != nil {
			t.Errorf("buffer row %d still holds %+v", i, r)
		}
	}
}

func TestUnseen(t *testing.T) {
	snap := &change.XidSnapshot{Xmin: 100, Xmax: 110, Xip: []uint32{105}}
	for _, tc := range []struct {
		name string
		xids []uint32
		want []uint32
	}{
		{"below xmin", []uint32{50, 99}, nil},
		{"running", []uint32{104, 105, 106}, []uint32{105}},
		{"at or above xmax", []uint32{110, 111}, []uint32{110, 111}},
		{"from before a wraparound", []uint32{110 + 1<<30, 110 + 1<<31 - 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unseen(tc.xids, snap); !slices.Equal(got, tc.want) {
				t.Errorf("unseen(%v) = %v, want %v", tc.xids, got, tc.want)
			}
		})
	}
}
