package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestDebeziumFormatsFlag(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		wantErr bool
	}{
		{name: "both", value: "json,avro"},
		{name: "avro alone", value: "avro"},
		{name: "json-with-schema is not offered", value: "json,json-with-schema", wantErr: true},
		{name: "empty", value: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags([]string{"-only", "debezium", "-debezium-formats", tt.value}, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("-debezium-formats %q: err = %v, want error %v", tt.value, err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "-debezium-formats") {
				t.Errorf("error %q does not name the flag", err)
			}
		})
	}
}

func TestApicurioConverter(t *testing.T) {
	m := apicurioConverter("http://127.0.0.1:1/apis/registry/v2")
	for _, side := range []string{"key", "value"} {
		for k, want := range map[string]string{
			".converter":                                   "io.apicurio.registry.utils.converter.AvroConverter",
			".converter.apicurio.registry.url":             "http://127.0.0.1:1/apis/registry/v2",
			".converter.apicurio.registry.as-confluent":    "true",
			".converter.apicurio.registry.headers.enabled": "false",
		} {
			if got := m[side+k]; got != want {
				t.Errorf("%s%s = %q, want %q", side, k, got, want)
			}
		}
	}
}

func TestPrintDebeziumFormats(t *testing.T) {
	run := func(cpu, perSecond float64) toolRun {
		return toolRun{Count: 1000, CPUSeconds: cpu, PerSecond: perSecond}
	}
	js := &debeziumResult{Format: "json", Tools: []debeziumTool{
		{Name: "Tidemark", Snapshot: run(1, 100), CatchUp: run(1, 100)},
		{Name: "Debezium, default producer", Snapshot: run(20, 10), CatchUp: run(40, 10)},
	}}
	av := &debeziumResult{Format: "avro", Tools: []debeziumTool{
		{Name: "Tidemark", Snapshot: run(0.5, 200), CatchUp: run(0.6, 150)},
		{Name: "Debezium, default producer", Snapshot: run(10, 10), CatchUp: run(12, 10)},
	}}
	var out bytes.Buffer
	printDebeziumFormats(&out, js, av)
	for _, want := range []string{
		"snapshot rows/s 2.00, cdc CPU per row 0.50; catch-up changes/s 1.50, cdc CPU per change 0.60",
		"Tidemark / Debezium, default producer, json: cdc CPU per record snapshot 0.050, catch-up 0.025",
		"Tidemark / Debezium, default producer, avro: cdc CPU per record snapshot 0.050, catch-up 0.050",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	printDebeziumFormats(&out, js, nil)
	if out.Len() != 0 {
		t.Errorf("one format printed a comparison: %q", out.String())
	}
}
