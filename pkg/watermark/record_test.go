package watermark

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

func lsnp(v change.LSN) *change.LSN { return &v }

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"", ModeIndependent, false},
		{"independent", ModeIndependent, false},
		{" Global ", ModeGlobal, false},
		{"GLOBAL", ModeGlobal, false},
		{"per-table", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMode(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseMode(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "independent") {
				t.Errorf("error %q does not name the valid modes", err)
			}
		})
	}
}

func sampleRecord() Record {
	finished := time.Date(2025, 3, 14, 9, 27, 35, 0, time.UTC)
	return Record{
		Version:   Version,
		Export:    change.ExportID{Schema: "Sales", Table: "order lines"},
		Topic:     "shop.Sales.order_lines",
		State:     StateHydrated,
		Mode:      ModeIndependent,
		Watermark: lsnp(0x1_016B_4A20),
		Position:  0x1_016B_4A20,
		Offsets:   map[int32]int64{0: 40211, 1: 39876},
		Snapshot: &SnapshotInfo{
			Attempt: 2, ConsistentPoint: 0x16B3748, RowsCopied: 10, RowsEstimated: 12,
			StartedAt: time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC), FinishedAt: &finished,
			StartOffsets: map[int32]int64{0: 3, 1: 4}, ReconcileFrom: map[int32]int64{0: 1},
		},
		Time: time.Date(2025, 3, 14, 9, 27, 36, 0, time.UTC),
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	hydrating := sampleRecord()
	hydrating.State, hydrating.Watermark, hydrating.Position = StateHydrating, nil, 0
	failed := sampleRecord()
	failed.State, failed.Error, failed.Snapshot = StateFailed, "value of column x cannot be encoded", nil

	tests := []struct {
		name     string
		rec      Record
		contains []string // fragments the JSON must contain
	}{
		{"hydrated", sampleRecord(), []string{
			`"version":1`, `"export":"\"Sales\".\"order lines\""`, `"watermark":"1/16B4A20"`,
			`"watermark_lsn":4318775840`, `"position":"1/16B4A20"`, `"offsets":{"0":40211,"1":39876}`,
			`"consistent_point":"0/16B3748"`, `"ts":"2025-03-14T09:27:36Z"`,
		}},
		{"hydrating without watermark", hydrating, []string{`"watermark":null`, `"watermark_lsn":null`, `"position":"0/0"`}},
		{"failed with reason", failed, []string{`"state":"failed"`, `"error":"value of column x cannot be encoded"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Encode(tt.rec)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.contains {
				if !bytes.Contains(b, []byte(c)) {
					t.Errorf("encoded record lacks %s:\n%s", c, b)
				}
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			again, err := Encode(got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, again) {
				t.Errorf("round trip changed the record:\n%s\n%s", b, again)
			}
			if got.Export != tt.rec.Export || !equalLSN(got.Watermark, tt.rec.Watermark) || got.State != tt.rec.State {
				t.Errorf("decoded %+v; want %+v", got, tt.rec)
			}
		})
	}
}

func TestEncodeFillsVersionAndNumber(t *testing.T) {
	r := sampleRecord()
	r.Version = 0
	r.WatermarkLSN = nil
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != Version || got.WatermarkLSN == nil || *got.WatermarkLSN != uint64(*r.Watermark) {
		t.Errorf("got version %d, watermark_lsn %v; want %d, %d", got.Version, got.WatermarkLSN, Version, *r.Watermark)
	}
}

func TestDecodeRejects(t *testing.T) {
	valid, err := Encode(sampleRecord())
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(valid, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name    string
		in      []byte
		want    string
		wantErr error
	}{
		{"newer version", edit(func(m map[string]any) { m["version"] = 2 }), "version 2 is newer", ErrUnsupportedVersion},
		{"missing version", edit(func(m map[string]any) { delete(m, "version") }), "missing or invalid version", nil},
		{"missing export", edit(func(m map[string]any) { delete(m, "export") }), "missing export", nil},
		{"unknown state", edit(func(m map[string]any) { m["state"] = "paused" }), `unknown state "paused"`, nil},
		{"disagreeing watermark", edit(func(m map[string]any) { m["watermark_lsn"] = 1 }), "disagree", nil},
		{"bad lsn", edit(func(m map[string]any) { m["watermark"] = "nope" }), "parse lsn", nil},
		{"not json", []byte("{"), "decode watermark record", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode(%s) error = %v; want one containing %q", tt.in, err, tt.want)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v is not %v", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeFillsWatermarkFromNumber(t *testing.T) {
	in := `{"version":1,"export":"public.a","topic":"p.public.a","state":"hydrated","mode":"global","watermark_lsn":4096,"position":"0/1000","offsets":{},"ts":"2025-01-01T00:00:00Z"}`
	r, err := Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if r.Watermark == nil || *r.Watermark != 0x1000 {
		t.Errorf("watermark = %v; want 0/1000", r.Watermark)
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	bad := sampleRecord()
	bad.State = "paused"
	if _, err := Encode(bad); err == nil {
		t.Error("Encode accepted an unknown state")
	}
	newer := sampleRecord()
	newer.Version = 7
	if _, err := Encode(newer); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("Encode(version 7) error = %v; want ErrUnsupportedVersion", err)
	}
}

func TestRecordKey(t *testing.T) {
	r := Record{Export: change.ExportID{Schema: "public", Table: "Orders"}}
	if got, want := string(r.Key()), `public."Orders"`; got != want {
		t.Errorf("Key() = %s; want %s", got, want)
	}
}

// FuzzDecode: Decode never panics, and what it accepts survives Encode/Decode unchanged.
func FuzzDecode(f *testing.F) {
	b, err := Encode(sampleRecord())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"version":1,"export":"a","state":"hydrating","watermark":null}`))
	f.Add([]byte(`{"version":1,"export":"a","state":"removed","watermark":"0/10","watermark_lsn":16}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := Decode(in)
		if err != nil {
			return
		}
		out, err := Encode(r)
		if err != nil {
			t.Fatalf("Encode of a decoded record: %v", err)
		}
		r2, err := Decode(out)
		if err != nil {
			t.Fatalf("Decode of an encoded record %s: %v", out, err)
		}
		out2, err := Encode(r2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("unstable round trip:\n%s\n%s", out, out2)
		}
	})
}
