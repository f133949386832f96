package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// The debezium scenario downloads Debezium: it runs with -only debezium and never as part of
// the default run of every scenario.
func TestDebeziumOnlyOnRequest(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.wants(scenarioDebezium) {
		t.Error("a run of every scenario includes debezium")
	}
	if !o.wants(scenarioSnapshot) {
		t.Error("a run of every scenario leaves out snapshot")
	}
	o, err = parseFlags([]string{"-only", "debezium", "-debezium-scale", "2", "-debezium-txns", "500"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.wants(scenarioDebezium) || o.wants(scenarioStream) {
		t.Errorf("-only debezium: wants(debezium)=%v wants(stream)=%v", o.wants(scenarioDebezium), o.wants(scenarioStream))
	}
	if o.debeziumScale != 2 || o.debeziumTxns != 500 {
		t.Errorf("-debezium-scale 2 -debezium-txns 500 parsed as %d, %d", o.debeziumScale, o.debeziumTxns)
	}
	if _, err := parseFlags([]string{"-only", "debezium", "-debezium-txns", "0"}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "-debezium-txns 0") {
		t.Errorf("-debezium-txns 0: err = %v, want one naming the flag", err)
	}
}

func TestDebeziumPrint(t *testing.T) {
	r := &debeziumResult{Scale: 10, Rows: 1_000_011, BacklogTxns: 100_000, Changes: 400_000, Debezium: debeziumVersion,
		Tools: []debeziumTool{
			{Name: "Tidemark, exactly-once", Snapshot: toolRun{PerSecond: 200_000, CPUSeconds: 3, PeakRSSMiB: 80},
				CatchUp: toolRun{PerSecond: 150_000, CPUSeconds: 2, PeakRSSMiB: 90}},
			{Name: "Debezium, default producer", Profile: profileDefault, Snapshot: toolRun{PerSecond: 20_000},
				CatchUp: toolRun{PerSecond: 15_000}},
		},
		SnapshotRatio: map[string]float64{profileDefault: 10},
		CatchUpRatio:  map[string]float64{profileDefault: 10},
	}
	var b bytes.Buffer
	r.print(&b)
	for _, want := range []string{"1,000,011 rows", "400,000 changes", "200,000", "150,000", "3.0 / 2.0", "80 / 90",
		"Tidemark / Debezium (default producer): snapshot 10.0x, catch-up 10.0x"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "matched producer)") {
		t.Errorf("table has a ratio for a profile that did not run:\n%s", b.String())
	}
}

func TestDebeziumReach(t *testing.T) {
	r := &debeziumResult{Cores: 2, ReadGo: 200_000, ReadRecvlogical: 100_000,
		Tools: []debeziumTool{
			{Name: "Tidemark", Snapshot: toolRun{Count: 1_000_000, PerSecond: 150_000, CPUSeconds: 3, PostgresCPUSeconds: 1, BrokerCPUSeconds: 4},
				CatchUp: toolRun{PerSecond: 150_000}},
			{Name: "Debezium, default", Snapshot: toolRun{PerSecond: 20_000}, CatchUp: toolRun{PerSecond: 12_000}},
			{Name: "Debezium, matched", Snapshot: toolRun{PerSecond: 38_000}, CatchUp: toolRun{PerSecond: 21_000}},
		}}
	var b bytes.Buffer
	r.printReach(&b)
	for _, want := range []string{
		"Tidemark at 0.75 of the faster; 10x Debezium's best is 210,000 changes/s, above the read limit",
		"Snapshot reach: Tidemark's run cost cdc 3.00 s, PostgreSQL 1.00 s and the broker 4.00 s of CPU per 1,000,000 rows",
		"10x Debezium's best (380,000 rows/s) needs 3.04 cores, 1.90 of them for the two servers, of 2: more cores than the machine has\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("reach lacks %q:\n%s", want, b.String())
		}
	}
	r.ReadGo = 250_000
	r.Tools[0].Snapshot.BrokerCPUSeconds = 5
	r.Tools[0].Snapshot.CPUSeconds = 0.1
	r.Tools[0].CatchUp = toolRun{Count: 400_000, PerSecond: 150_000, CPUSeconds: 0.1, PostgresCPUSeconds: 0.5, BrokerCPUSeconds: 0.2}
	b.Reset()
	r.printReach(&b)
	for _, want := range []string{"210,000 changes/s, within the read limit",
		"needs 2.32 cores, 2.28 of them for the two servers, of 2: more cores than the machine has, before cdc spends any",
		"Catch-up reach: Tidemark's run cost cdc 0.25 s, PostgreSQL 1.25 s and the broker 0.50 s of CPU per 1,000,000 changes; at that cost 10x Debezium's best (210,000 changes/s) needs 0.42 cores, 0.37 of them for the two servers, of 2: within the machine's cores"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("reach lacks %q:\n%s", want, b.String())
		}
	}
}
