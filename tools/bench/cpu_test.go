package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestPrintCPUShare(t *testing.T) {
	var b bytes.Buffer
	// 1,000,000 records in 4 s; cdc 2 s, PostgreSQL 1 s, broker 2 s of CPU on 2 cores.
	printCPUShare(&b, "cdc chunked", 1_000_000, 4, 2, 1, 2, "2")
	got := b.String()
	for _, want := range []string{"cdc 2.00s, PostgreSQL 1.00s, broker 2.00s = 5.00s", "1.25 of 2 cores busy", "would allow 400,000 records/s"} {
		if !strings.Contains(got, want) {
			t.Errorf("got %q, want it to contain %q", got, want)
		}
	}
	b.Reset()
	printCPUShare(&b, "cdc chunked", 1_000_000, 4, 2, 0, 0, "2")
	if b.Len() != 0 {
		t.Errorf("no server CPU known: printed %q", b.String())
	}
}

func TestCPUSampleSince(t *testing.T) {
	before := cpuSample{postgres: 10, broker: 20, ok: true}
	pg, br, ok := cpuSample{postgres: 12.5, broker: 23, ok: true}.since(before)
	if !ok || pg != 2.5 || br != 3 {
		t.Errorf("since = %v, %v, %v; want 2.5, 3, true", pg, br, ok)
	}
	if _, _, ok := (cpuSample{}).since(before); ok {
		t.Error("since of an unknown sample is ok")
	}
	var m *serverCPU
	if m.sample().ok {
		t.Error("no state folder: sample is ok")
	}
}

func TestFormatRates(t *testing.T) {
	if got := formatRates([]float64{200380.4, 412007, 388501.9}); got != "200,380 / 412,007 / 388,501" {
		t.Errorf("formatRates = %q", got)
	}
	if got := formatRates([]float64{5}); got != "5" {
		t.Errorf("formatRates of one = %q", got)
	}
}

func TestVmHWM(t *testing.T) {
	if kib := vmHWM(os.Getpid()); kib <= 0 {
		t.Errorf("vmHWM of this process = %d KiB, want > 0", kib)
	}
	if kib := vmHWM(-1); kib != 0 {
		t.Errorf("vmHWM of no process = %d, want 0", kib)
	}
}

func TestHostSteal(t *testing.T) {
	before := parseHostCPU([]byte("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n"))
	after := parseHostCPU([]byte("cpu  200 0 100 1500 10 0 5 135 20 0\n"))
	if !before.ok || !after.ok {
		t.Fatalf("parse failed: %+v %+v", before, after)
	}
	// total 1000 -> 1950 ticks, steal 35 -> 135: 100 of 950.
	got, ok := after.stealPercent(before)
	if !ok || got < 10.52 || got > 10.53 {
		t.Errorf("steal = %.3f%% (%v), want 10.526%%", got, ok)
	}
	if _, ok := after.stealPercent(hostCPU{}); ok {
		t.Error("steal against an unread sample reported ok")
	}
	if h := parseHostCPU([]byte("intr 1 2 3\n")); h.ok {
		t.Error("a file without a cpu line parsed")
	}
}
