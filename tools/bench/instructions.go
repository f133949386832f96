package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tidemark/cdc/internal/testsvc"
)

// The hot loops in instructions (-instructions, `make bench-instructions`): Go benchmarks run a
// fixed number of iterations under valgrind --tool=callgrind, which counts the instructions
// executed (Ir). Timings move with the machine's load; these counts do not (within 0.5% with
// the collector off). Each benchmark runs twice, with n1 and n2 iterations, and the difference
// divided by the records of n2 - n1 iterations is the instructions per record, without the
// process's start-up and the benchmark's set-up. The runtime is kept deterministic: GOMAXPROCS=1
// (no idle processor spinning for work) and GODEBUG=asyncpreemptoff=1 (callgrind aborts on the
// preemption signal). GOGC=off counts the code path alone, once; the default GOGC adds the
// collector's work, which depends on timing, so that column is the median of three runs.
//
// For BenchmarkDecodeTxn the instructions spent in pkg/codec (calls into it from outside it,
// inclusive, as callgrind_annotate --tree=caller gives them) are the encode part; the rest is
// decoding, routing and the hand-off of the unit.

// instrBench is one benchmark measured in instructions.
type instrBench struct {
	pkg, name string
	perIter   int // records per iteration
	unit      string
	n1, n2    int
	// encode reports the pkg/codec part separately.
	encode bool
}

var instrBenches = []instrBench{
	{pkg: "./pkg/replication/", name: "BenchmarkDecodeTxn", perIter: 100, unit: "change", n1: 200, n2: 1200, encode: true},
	{pkg: "./pkg/codec/", name: "BenchmarkRead", perIter: 1, unit: "row", n1: 10_000, n2: 110_000},
	{pkg: "./pkg/codec/", name: "BenchmarkCopyLineToRecord", perIter: 1, unit: "row", n1: 10_000, n2: 110_000},
	// One update of an 8-column row with its before-image, in each CDC_VALUE_FORMAT (the
	// formats scenario's cdc CPU per record, without the pipeline around the encoder).
	{pkg: "./pkg/codec/", name: "BenchmarkUpdateFormats/format=json", perIter: 1, unit: "update", n1: 10_000, n2: 60_000},
	{pkg: "./pkg/codec/", name: "BenchmarkUpdateFormats/format=json-with-schema", perIter: 1, unit: "update", n1: 10_000, n2: 60_000},
	{pkg: "./pkg/codec/", name: "BenchmarkUpdateFormats/format=avro", perIter: 1, unit: "update", n1: 10_000, n2: 60_000},
	// The sink's produce path: Run, franz-go's producer and kfake, the in-process broker, whose
	// share is counted too and whose batching follows timing, so this count moves by a few
	// percent between runs (BenchmarkProduceCPU measures against a real broker).
	{pkg: "./pkg/sink/", name: "BenchmarkRun/exactly-once", perIter: 100, unit: "record", n1: 200, n2: 1200},
}

// instrResult is one benchmark's instructions per record.
type instrResult struct {
	Benchmark string    `json:"benchmark"`
	Unit      string    `json:"unit"`
	NoGC      float64   `json:"instructions_gogc_off"`
	NoGCCodec float64   `json:"instructions_gogc_off_codec,omitempty"`
	GC        float64   `json:"instructions_gogc_default_median"`
	GCRuns    []float64 `json:"instructions_gogc_default_runs"`
}

// instructions builds the test binaries, counts, prints the table and writes the JSON file.
func instructions(ctx context.Context, root, out string, stdout io.Writer, logf func(string, ...any)) error {
	for _, tool := range []string{"valgrind", "callgrind_annotate"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: apt-get install -y valgrind", tool)
		}
	}
	work, err := os.MkdirTemp("", "tidemark-instructions-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bins := make(map[string]string)
	var results []instrResult
	for _, b := range instrBenches {
		bin, ok := bins[b.pkg]
		if !ok {
			bin = filepath.Join(work, strings.Trim(filepath.Base(b.pkg), "/")+".test")
			logf("go test -c %s", b.pkg)
			cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, b.pkg)
			cmd.Dir = root
			if o, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go test -c %s: %w\n%s", b.pkg, err, o)
			}
			bins[b.pkg] = bin
		}
		r := instrResult{Benchmark: b.name, Unit: b.unit}
		records := float64((b.n2 - b.n1) * b.perIter)
		count := func(gogc string, n, i int) (total, codec float64, err error) {
			file := filepath.Join(work, fmt.Sprintf("%s.%s.%d.%d.out", b.name, gogc, n, i))
			// The codec's part only with the collector off: with it on, callgrind's call tracking
			// loses its way in the runtime's stack switches and counts some calls twice.
			return callgrind(ctx, bin, b.name, gogc, n, file, b.encode && gogc == "off")
		}
		t1, c1, err := count("off", b.n1, 0)
		if err != nil {
			return err
		}
		t2, c2, err := count("off", b.n2, 0)
		if err != nil {
			return err
		}
		r.NoGC, r.NoGCCodec = (t2-t1)/records, (c2-c1)/records
		for i := range 3 {
			t1, _, err := count("100", b.n1, i)
			if err != nil {
				return err
			}
			t2, _, err := count("100", b.n2, i)
			if err != nil {
				return err
			}
			r.GCRuns = append(r.GCRuns, (t2-t1)/records)
		}
		r.GC = median(r.GCRuns)
		logf("%s: %.0f instructions per %s (GOGC=off), %.0f (GOGC=100, median)", b.name, r.NoGC, b.unit, r.GC)
		results = append(results, r)
	}
	printInstructions(stdout, results)
	b, err := json.MarshalIndent(map[string]any{"command": "go run ./tools/bench -instructions", "instructions": results}, "", "  ")
	if err != nil {
		return err
	}
	logf("results written to %s", out)
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

var totalsRE = regexp.MustCompile(`(?m)^totals:\s+(\d+)`)

// callgrind runs one benchmark for n iterations under callgrind and returns the instructions
// counted, and with codec those of the calls into pkg/codec from outside it.
func callgrind(ctx context.Context, bin, name, gogc string, n int, file string, codec bool) (float64, float64, error) {
	cmd := exec.CommandContext(ctx, "valgrind", "--tool=callgrind", "--callgrind-out-file="+file,
		bin, "-test.run", "^$", "-test.bench", "^"+name+"$", "-test.benchtime", fmt.Sprintf("%dx", n))
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GODEBUG=asyncpreemptoff=1", "GOGC="+gogc)
	cmd.Dir = filepath.Dir(bin)
	if o, err := cmd.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("callgrind %s %dx: %w\n%s", name, n, err, testsvc.Tail(string(o), 15))
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, err
	}
	m := totalsRE.FindSubmatch(data)
	if m == nil {
		return 0, 0, fmt.Errorf("no totals line in %s", file)
	}
	total, _ := strconv.ParseFloat(string(m[1]), 64)
	if !codec {
		return total, 0, nil
	}
	ann, err := exec.CommandContext(ctx, "callgrind_annotate", "--inclusive=yes", "--tree=caller", "--threshold=100", file).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("callgrind_annotate %s: %w", file, err)
	}
	return total, callsInto(string(ann), "github.com/tidemark/cdc/pkg/replication.", "github.com/tidemark/cdc/pkg/codec.", "github.com/tidemark/cdc/pkg/format"), nil
}

// callsInto sums, in callgrind_annotate --tree=caller output, the inclusive instructions of the
// calls into functions whose name starts with one of prefixes (the encoding: the envelope layer
// and the formats), from callers whose name starts with from (the replication stage, the
// benchmark's only way in): a block lists its callers ("<" lines, each with the cost of its
// calls) before the function itself ("*" line). Counting only the calls from the stage keeps a
// call the encoding makes through another package (which calls back into it) from counting
// twice.
func callsInto(annotated, from string, prefixes ...string) float64 {
	inside := func(fn string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(fn, p) {
				return true
			}
		}
		return false
	}
	var sum float64
	type caller struct {
		cost float64
		fn   string
	}
	var callers []caller
	for _, line := range strings.Split(annotated, "\n") {
		cost, marker, fn, ok := annotatedLine(line)
		switch {
		case !ok:
			callers = callers[:0]
		case marker == "<":
			callers = append(callers, caller{cost, fn})
		case marker == "*":
			if inside(fn) {
				for _, c := range callers {
					if strings.HasPrefix(c.fn, from) {
						sum += c.cost
					}
				}
			}
			callers = callers[:0]
		}
	}
	return sum
}

// annotatedLine parses "  1,234 (12.34%)  < file:function (3x) [binary]".
func annotatedLine(line string) (cost float64, marker, fn string, ok bool) {
	head, rest, found := strings.Cut(line, "%)")
	if !found {
		return 0, "", "", false
	}
	num, _, _ := strings.Cut(strings.TrimSpace(head), " ")
	cost, err := strconv.ParseFloat(strings.ReplaceAll(num, ",", ""), 64)
	f := strings.Fields(rest)
	if err != nil || len(f) < 2 || (f[0] != "<" && f[0] != "*") {
		return 0, "", "", false
	}
	return cost, f[0], funcName(f[1]), true
}

// funcName is the function of a callgrind_annotate "file:function" field, without the
// recursion mark ('2).
func funcName(field string) string {
	_, fn, ok := strings.Cut(field, ":")
	if !ok {
		fn = field
	}
	if i := strings.IndexByte(fn, '\''); i >= 0 {
		fn = fn[:i]
	}
	return fn
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func printInstructions(w io.Writer, rs []instrResult) {
	fmt.Fprintf(w, "\n=== Instructions per record (valgrind --tool=callgrind, Ir; difference of two run lengths; GOMAXPROCS=1) ===\n")
	fmt.Fprintf(w, "   GOGC=off is the code path alone and repeats within 0.5%%; GOGC=100 adds the collector, whose work depends on timing.\n")
	fmt.Fprintf(w, "   %-58s %14s %22s\n", "", "GOGC=off", "GOGC=100 (median of 3)")
	for _, r := range rs {
		fmt.Fprintf(w, "   %-58s %14s %22s\n", r.Benchmark+", per "+r.Unit, thousands(int64(r.NoGC)), thousands(int64(r.GC)))
		switch {
		case r.NoGCCodec > r.NoGC:
			// Call-graph attribution across inlined frames counted some encoding twice: a split
			// that does not add up is not printed.
			fmt.Fprintf(w, "   %-58s %14s %22s\n", "  of which encode: not separable in this build's call graph", "-", "-")
		case r.NoGCCodec > 0:
			fmt.Fprintf(w, "   %-58s %14s %22s\n", "  of which encode (calls into pkg/codec, pkg/format)", thousands(int64(r.NoGCCodec)), "-")
			fmt.Fprintf(w, "   %-58s %14s %22s\n", "  decode, routing, hand-off (the rest)", thousands(int64(r.NoGC-r.NoGCCodec)), "-")
		}
	}
	for _, r := range rs {
		fmt.Fprintf(w, "   %s GOGC=100 runs: %s\n", r.Benchmark, formatRates(r.GCRuns))
	}
}
