package snapshot

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/tidemark/cdc/pkg/change"
)

// Range is a set of heap blocks of one table: [Start, End), or every block from Start on when
// Open. The last range of a table is open, so rows in blocks added after the table was sized are
// still read (they are invisible to the snapshot anyway, but the scan must not depend on it).
type Range struct {
	Start int64
	End   int64 // unused when Open
	Open  bool
}

// Predicate is the WHERE condition selecting the range by ctid; empty for a range that is the
// whole table.
func (r Range) Predicate() string {
	switch {
	case r.Open && r.Start == 0:
		return ""
	case r.Open:
		return fmt.Sprintf("ctid >= '(%d,0)'::tid", r.Start)
	default:
		return fmt.Sprintf("ctid >= '(%d,0)'::tid AND ctid < '(%d,0)'::tid", r.Start, r.End)
	}
}

func (r Range) String() string {
	if r.Open {
		return fmt.Sprintf("[%d,∞)", r.Start)
	}
	return fmt.Sprintf("[%d,%d)", r.Start, r.End)
}

// SplitRanges splits a table of blocks blocks into ranges of about rangeBlocks blocks each. The
// ranges cover [0, blocks) without overlap, in order, and the last one is open-ended. An empty
// table, or one no larger than rangeBlocks, is one open range. Sizes are balanced: they differ by
// at most one block.
func SplitRanges(blocks, rangeBlocks int64) []Range {
	if rangeBlocks <= 0 {
		rangeBlocks = DefaultRangeBlocks
	}
	if blocks <= rangeBlocks {
		return []Range{{Start: 0, Open: true}}
	}
	n := (blocks + rangeBlocks - 1) / rangeBlocks
	size, extra := blocks/n, blocks%n
	ranges := make([]Range, 0, n)
	var start int64
	for i := range n {
		end := start + size
		if i < extra {
			end++
		}
		ranges = append(ranges, Range{Start: start, End: end})
		start = end
	}
	last := &ranges[len(ranges)-1]
	last.Open, last.End = true, 0
	return ranges
}

// Task is one range of one export, an item of the workers' shared queue.
type Task struct {
	Export change.ExportID
	Range  Range
}

// BuildQueue orders the ranges of every table for the workers: largest tables (by blocks) first,
// ties by export name, and each table's ranges in block order. Starting the largest tables first
// shortens the total copy time; a table's ranges stay together so it finishes, and is released,
// as early as possible.
func BuildQueue(tables []TableInfo, rangeBlocks int64) []Task {
	order := slices.Clone(tables)
	slices.SortStableFunc(order, func(a, b TableInfo) int {
		if c := cmp.Compare(b.Blocks, a.Blocks); c != 0 {
			return c
		}
		return cmp.Compare(a.Table.Export.String(), b.Table.Export.String())
	})
	var q []Task
	for _, t := range order {
		for _, r := range SplitRanges(t.Blocks, rangeBlocks) {
			q = append(q, Task{Export: t.Table.Export, Range: r})
		}
	}
	return q
}
