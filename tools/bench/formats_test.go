package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestFormatOrder(t *testing.T) {
	tests := []struct {
		name   string
		rounds int
		want   []int
	}{
		{name: "one round", rounds: 1, want: []int{0, 1, 2}},
		{name: "two rounds mirror", rounds: 2, want: []int{0, 1, 2, 2, 1, 0}},
		{name: "three rounds", rounds: 3, want: []int{0, 1, 2, 2, 1, 0, 0, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := formatOrder(tt.rounds); !slices.Equal(got, tt.want) {
				t.Errorf("formatOrder(%d) = %v, want %v", tt.rounds, got, tt.want)
			}
		})
	}
}

func TestFormatsRatios(t *testing.T) {
	r := &formatsResult{Rounds: 2, Formats: []formatResult{{Format: "json"}, {Format: "json-with-schema"}, {Format: "avro"}}}
	// json: 2 runs of 1,000 rows in 1 s each, 2 s of CPU in all (1 ms per row).
	r.Formats[0].Snapshot.add(1000, 1, 1, 300_000, 400_000)
	r.Formats[0].Snapshot.add(1000, 1, 1, 300_000, 400_000)
	r.Formats[0].CatchUp.add(4000, 2, 4, 0, 0)
	// avro: twice json's rate, half its CPU per row.
	r.Formats[2].Snapshot.add(2000, 1, 1, 200_000, 300_000)
	r.Formats[2].CatchUp.add(4000, 4, 1, 0, 0)
	r.setRatios()
	checks := []struct {
		name      string
		got, want float64
	}{
		{"json rate ratio", r.Formats[0].Snapshot.RateRatio, 1},
		{"avro snapshot rate ratio", r.Formats[2].Snapshot.RateRatio, 2},
		{"avro snapshot cpu ratio", r.Formats[2].Snapshot.CPURatio, 0.5},
		{"avro catch-up rate ratio", r.Formats[2].CatchUp.RateRatio, 0.5},
		{"avro catch-up cpu ratio", r.Formats[2].CatchUp.CPURatio, 0.25},
		{"json-with-schema without runs", r.Formats[1].Snapshot.CPURatio, 0},
		{"json broker bytes per row", r.Formats[0].Snapshot.perRecord(float64(r.Formats[0].Snapshot.BrokerBytes)), 300},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	var out bytes.Buffer
	printFormats(&out, r)
	for _, want := range []string{"avro / json cdc CPU per record: snapshot 0.50, catch-up 0.25 (target <= 0.6)", "key+value B/rec"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printFormats output lacks %q:\n%s", want, out.String())
		}
	}
}
