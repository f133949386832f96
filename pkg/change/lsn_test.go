package change

import "testing"

func TestLSNRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want LSN
	}{
		{name: "zero", in: "0/0", want: 0},
		{name: "low", in: "0/16B3748", want: 0x16B3748},
		{name: "high", in: "1A/FF000000", want: 0x1A_FF000000},
		{name: "max", in: "FFFFFFFF/FFFFFFFF", want: ^LSN(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLSN(tt.in)
			if err != nil {
				t.Fatalf("ParseLSN(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseLSN(%q) = %d, want %d", tt.in, got, tt.want)
			}
			if got.String() != tt.in {
				t.Fatalf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
	for _, bad := range []string{"", "0", "x/1", "1/", "100000000/0"} {
		if _, err := ParseLSN(bad); err == nil {
			t.Errorf("ParseLSN(%q): want error", bad)
		}
	}
}

func TestParseExportID(t *testing.T) {
	tests := []struct {
		in   string
		want ExportID
	}{
		{"orders", ExportID{"public", "orders"}},
		{"Sales.Orders", ExportID{"sales", "orders"}},
		{`"Sales"."Order Lines"`, ExportID{"Sales", "Order Lines"}},
		{`s."a""b"`, ExportID{"s", `a"b`}},
		{`"ünï"."çødé"`, ExportID{"ünï", "çødé"}},
	}
	for _, tt := range tests {
		got, err := ParseExportID(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseExportID(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		back, err := ParseExportID(got.String())
		if err != nil || back != got {
			t.Errorf("round trip of %v via %q = %v, %v", got, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "a.b.c", `"unterminated`, "a..b"} {
		if _, err := ParseExportID(bad); err == nil {
			t.Errorf("ParseExportID(%q): want error", bad)
		}
	}
}
