package snapshot

import "testing"

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
