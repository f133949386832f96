package snapshot

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

func TestSplitRanges(t *testing.T) {
	tests := []struct {
		name        string
		blocks, per int64
		want        []Range
	}{
		{name: "empty table", blocks: 0, per: 2048, want: []Range{{Start: 0, Open: true}}},
		{name: "one block", blocks: 1, per: 2048, want: []Range{{Start: 0, Open: true}}},
		{name: "exactly one range", blocks: 2048, per: 2048, want: []Range{{Start: 0, Open: true}}},
		{name: "one block over", blocks: 2049, per: 2048, want: []Range{{Start: 0, End: 1025}, {Start: 1025, Open: true}}},
		{name: "even split", blocks: 30, per: 10, want: []Range{{0, 10, false}, {10, 20, false}, {20, 0, true}}},
		{name: "balanced", blocks: 31, per: 10, want: []Range{{0, 8, false}, {8, 16, false}, {16, 24, false}, {24, 0, true}}},
		{name: "zero per range uses default", blocks: 4096, per: 0, want: []Range{{0, 2048, false}, {2048, 0, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SplitRanges(tt.blocks, tt.per)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("SplitRanges(%d, %d) = %v, want %v", tt.blocks, tt.per, got, tt.want)
			}
		})
	}
}

// TestSplitRangesProperties checks, for many sizes, that the ranges cover [0, blocks) exactly,
// in order and without overlap, that only the last is open-ended, and that none is larger than
// asked for or empty.
func TestSplitRangesProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		blocks := rng.Int64N(1 << 20)
		if rng.IntN(4) == 0 {
			blocks = rng.Int64N(50)
		}
		per := 1 + rng.Int64N(5000)
		if rng.IntN(4) == 0 {
			per = 1 + rng.Int64N(8)
			blocks %= 5000
		}
		checkCover(t, blocks, per, SplitRanges(blocks, per))
	}
}

func checkCover(t testing.TB, blocks, per int64, ranges []Range) {
	t.Helper()
	if len(ranges) == 0 {
		t.Fatalf("blocks=%d per=%d: no ranges", blocks, per)
	}
	if ranges[0].Start != 0 {
		t.Fatalf("blocks=%d per=%d: first range starts at %d", blocks, per, ranges[0].Start)
	}
	next := int64(0)
	for i, r := range ranges {
		last := i == len(ranges)-1
		if r.Open != last {
			t.Fatalf("blocks=%d per=%d: range %d of %d open=%v", blocks, per, i, len(ranges), r.Open)
		}
		if r.Start != next {
			t.Fatalf("blocks=%d per=%d: range %d starts at %d, want %d (gap or overlap)", blocks, per, i, r.Start, next)
		}
		end := r.End
		if last {
			end = max(blocks, r.Start) // the open range reaches the table's end
			if r.Start > 0 && r.Start >= blocks {
				t.Fatalf("blocks=%d per=%d: open range starts at %d, past the table", blocks, per, r.Start)
			}
		}
		if size := end - r.Start; size > per || (size <= 0 && blocks > 0) {
			t.Fatalf("blocks=%d per=%d: range %d has %d blocks", blocks, per, i, size)
		}
		next = end
	}
	if next != max(blocks, 0) {
		t.Fatalf("blocks=%d per=%d: ranges end at %d", blocks, per, next)
	}
	if want := max((blocks+per-1)/per, 1); int64(len(ranges)) != want {
		t.Fatalf("blocks=%d per=%d: %d ranges, want %d", blocks, per, len(ranges), want)
	}
}

func TestRangePredicate(t *testing.T) {
	tests := []struct {
		name string
		r    Range
		want string
	}{
		{name: "whole table", r: Range{Start: 0, Open: true}, want: ""},
		{name: "closed", r: Range{Start: 10, End: 20}, want: "ctid >= '(10,0)'::tid AND ctid < '(20,0)'::tid"},
		{name: "open tail", r: Range{Start: 4294967294, Open: true}, want: "ctid >= '(4294967294,0)'::tid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Predicate(); got != tt.want {
				t.Fatalf("Predicate() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBuildQueue(t *testing.T) {
	tbl := func(schema, name string, blocks int64) TableInfo {
		return TableInfo{Table: &change.Table{Export: change.ExportID{Schema: schema, Table: name}}, Blocks: blocks}
	}
	q := BuildQueue([]TableInfo{
		tbl("public", "small", 5),
		tbl("public", "empty", 0),
		tbl("public", "big", 25),
		tbl("s", "mid", 15),
		tbl("public", "mid", 15),
	}, 10)
	type item struct {
		table string
		r     Range
	}
	var got []item
	for _, task := range q {
		got = append(got, item{task.Export.String(), task.Range})
	}
	want := []item{
		{"public.big", Range{0, 9, false}}, {"public.big", Range{9, 17, false}}, {"public.big", Range{17, 0, true}},
		{"public.mid", Range{0, 8, false}}, {"public.mid", Range{8, 0, true}},
		{"s.mid", Range{0, 8, false}}, {"s.mid", Range{8, 0, true}},
		{"public.small", Range{0, 0, true}},
		{"public.empty", Range{0, 0, true}},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("BuildQueue order:\n got %v\nwant %v", got, want)
	}
}

// TestBuildQueueProperties checks on random table sets that the queue holds each table's ranges
// exactly once, in block order, with the tables in non-increasing size.
func TestBuildQueueProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		n := 1 + rng.IntN(8)
		var tables []TableInfo
		blocks := map[change.ExportID]int64{}
		for i := range n {
			id := change.ExportID{Schema: "public", Table: string(rune('a' + i))}
			b := rng.Int64N(100)
			blocks[id] = b
			tables = append(tables, TableInfo{Table: &change.Table{Export: id}, Blocks: b})
		}
		per := 1 + rng.Int64N(20)
		q := BuildQueue(tables, per)
		byTable := map[change.ExportID][]Range{}
		var order []change.ExportID
		for _, task := range q {
			if _, seen := byTable[task.Export]; !seen {
				order = append(order, task.Export)
			} else if order[len(order)-1] != task.Export {
				t.Fatalf("ranges of %s are not contiguous in the queue", task.Export)
			}
			byTable[task.Export] = append(byTable[task.Export], task.Range)
		}
		if len(order) != n {
			t.Fatalf("queue has %d tables, want %d", len(order), n)
		}
		for i := 1; i < len(order); i++ {
			if blocks[order[i-1]] < blocks[order[i]] {
				t.Fatalf("table %s (%d blocks) queued before larger %s (%d blocks)", order[i-1], blocks[order[i-1]], order[i], blocks[order[i]])
			}
		}
		for id, rs := range byTable {
			checkCover(t, blocks[id], per, rs)
		}
	}
}

func TestTIDRangeScans(t *testing.T) {
	tests := []struct {
		version string
		want    bool
	}{
		{"15.4 (Debian 15.4-1)", true},
		{"14beta1", true},
		{"13.12", false},
		{"9.6.24", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			if got := tidRangeScans(tt.version); got != tt.want {
				t.Fatalf("tidRangeScans(%q) = %v, want %v", tt.version, got, tt.want)
			}
		})
	}
}
