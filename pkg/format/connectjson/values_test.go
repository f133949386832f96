package connectjson

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/format"
)

func TestTextOf(t *testing.T) {
	text := &format.Column{}
	bytea := &format.Column{IsBytea: true}
	jsonb := &format.Column{IsJSON: true}
	tests := []struct {
		name string
		raw  string
		col  *format.Column
		want string
		null bool
	}{
		{name: "null", raw: "null", col: text, null: true},
		{name: "number", raw: "-9223372036854775808", col: &format.Column{}, want: "-9223372036854775808"},
		{name: "float", raw: "1e+100", col: &format.Column{}, want: "1e+100"},
		{name: "string escapes", raw: `"a\"b\\c\n\u0001😀"`, col: text, want: "a\"b\\c\n\x01😀"},
		{name: "plain string", raw: `"ünï€ode 😀 {a,b}"`, col: text, want: "ünï€ode 😀 {a,b}"},
		{name: "numeric string", raw: `"NaN"`, col: &format.Column{}, want: "NaN"},
		{name: "bool", raw: "true", col: &format.Column{}, want: "true"},
		{name: "bytea", raw: `"AAH/"`, col: bytea, want: `\x0001ff`},
		{name: "jsonb object kept", raw: `{"b": 1, "a": [1, 2.50]}`, col: jsonb, want: `{"b": 1, "a": [1, 2.50]}`},
		{name: "jsonb string kept quoted", raw: `"just a string"`, col: jsonb, want: `"just a string"`},
		{name: "int array", raw: `[1,null,-3]`, col: &format.Column{Elem: &format.Column{}}, want: `{"1",NULL,"-3"}`},
		{name: "2-d array", raw: `[[1,2],[3,4]]`, col: &format.Column{Elem: &format.Column{}}, want: `{{"1","2"},{"3","4"}}`},
		{name: "text array quoting", raw: `["quote \"","back\\slash","NULL",null,"","a,b"]`, col: &format.Column{Elem: text},
			want: `{"quote \"","back\\slash","NULL",NULL,"","a,b"}`},
		{name: "bytea array", raw: `["AQ=="]`, col: &format.Column{Elem: bytea}, want: `{"\\x01"}`},
		{name: "jsonb array", raw: `[{"a":1},[1,"x\"y"],null]`, col: &format.Column{Elem: jsonb}, want: `{"{\"a\":1}","[1,\"x\\\"y\"]",NULL}`},
		{name: "array of another type as one string", raw: `"{a,b}"`, col: &format.Column{Elem: &format.Column{}}, want: "{a,b}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := textOf((tt.raw), tt.col)
			if err != nil {
				t.Fatal(err)
			}
			if ok == tt.null || got != tt.want {
				t.Errorf("textOf(%s) = %q, %v; want %q, null %v", tt.raw, got, ok, tt.want, tt.null)
			}
		})
	}
}

func TestConnectText(t *testing.T) {
	dec := func(scale string) *field {
		return &field{Type: "bytes", Name: "org.apache.kafka.connect.data.Decimal", Parameters: map[string]string{"scale": scale}}
	}
	tests := []struct {
		name string
		raw  string
		f    *field
		want string
	}{
		{name: "decimal", raw: `"AJY="`, f: dec("2"), want: "1.50"},           // 150
		{name: "negative decimal", raw: `"/2o="`, f: dec("2"), want: "-1.50"}, // -150
		{name: "small decimal", raw: `"BQ=="`, f: dec("5"), want: "0.00005"},  // 5
		{name: "variable scale", raw: `{"scale":1,"value":"Dw=="}`, f: &field{Type: "struct", Name: "io.debezium.data.VariableScaleDecimal"}, want: "1.5"},
		{name: "date", raw: "19753", f: &field{Type: "int32", Name: "io.debezium.time.Date"}, want: "2024-01-31"},
		{name: "year 1", raw: "-719162", f: &field{Type: "int32", Name: "io.debezium.time.Date"}, want: "0001-01-01"},
		{name: "date BC", raw: "-719163", f: &field{Type: "int32", Name: "io.debezium.time.Date"}, want: "0001-12-31 BC"},
		{name: "date infinity", raw: "-2147483648", f: &field{Type: "int32", Name: "io.debezium.time.Date"}, want: ""},
		{name: "micro timestamp", raw: "1706704496123456", f: &field{Type: "int64", Name: "io.debezium.time.MicroTimestamp"}, want: "2024-01-31 12:34:56.123456"},
		{name: "before 1970", raw: "-1", f: &field{Type: "int64", Name: "io.debezium.time.MicroTimestamp"}, want: "1969-12-31 23:59:59.999999"},
		{name: "timestamp infinity", raw: "9223372036825200000", f: &field{Type: "int64", Name: "io.debezium.time.MicroTimestamp"}, want: "infinity"},
		{name: "milli timestamp", raw: "1706704496123", f: &field{Type: "int64", Name: "io.debezium.time.Timestamp"}, want: "2024-01-31 12:34:56.123000"},
		{name: "micro time", raw: "45296500000", f: &field{Type: "int64", Name: "io.debezium.time.MicroTime"}, want: "12:34:56.500000"},
		{name: "zoned", raw: `"2024-01-31T12:34:56.123Z"`, f: &field{Type: "string", Name: "io.debezium.time.ZonedTimestamp"}, want: "2024-01-31T12:34:56.123Z"},
		{name: "bytes", raw: `"AAH/"`, f: &field{Type: "bytes"}, want: `\x0001ff`},
		{name: "array", raw: `[1,null,2]`, f: &field{Type: "array", Items: &field{Type: "int32"}}, want: `{"1",NULL,"2"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := connectText((tt.raw), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("connectText(%s) = %q, want %q", tt.raw, got, tt.want)
			}
		})
	}
}

// TestHostileDecimals: a decimal whose scale or size is beyond PostgreSQL's numeric is refused
// at once, as a permanent error (on c9cb695 a scale of -3e9 ran out of memory and one of 3e6
// pinned a core for ten minutes).
func TestHostileDecimals(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  string
		f    *field
	}{
		{"scale -3e9", `"AQ=="`, &field{Type: "bytes", Name: "org.apache.kafka.connect.data.Decimal", Parameters: map[string]string{"scale": "-3000000000"}}},
		{"scale 3e6", `"AQ=="`, &field{Type: "bytes", Name: "org.apache.kafka.connect.data.Decimal", Parameters: map[string]string{"scale": "3000000"}}},
		{"variable scale 3e6", `{"scale":3000000,"value":"AQ=="}`, &field{Type: "struct", Name: "io.debezium.data.VariableScaleDecimal"}},
		{"too many digits", `"` + strings.Repeat("A", 200_000) + `"`, &field{Type: "bytes", Name: "org.apache.kafka.connect.data.Decimal", Parameters: map[string]string{"scale": "0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, _, err := connectText((tc.raw), tc.f)
			if !errors.Is(err, format.ErrBeyondPostgres) || time.Since(start) > 5*time.Second {
				t.Fatalf("%v after %s, want a permanent error at once", err, time.Since(start))
			}
		})
	}
	// The largest scale PostgreSQL takes still works.
	got, _, err := connectText((`"AQ=="`), &field{Type: "bytes", Name: "org.apache.kafka.connect.data.Decimal", Parameters: map[string]string{"scale": "16383"}})
	if err != nil || len(got) != 16385 || !strings.HasSuffix(got, "1") {
		t.Fatalf("scale 16383: %d chars, %v", len(got), err)
	}
}

// TestHostileShapes: arrays nested past PostgreSQL's 6 dimensions (json and Connect schemas)
// and timestamps whose milliseconds overflow microseconds are refused as permanent errors,
// not read level by level or wrapped around into another date.
func TestHostileShapes(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	intArray := &format.Column{Elem: &format.Column{}}
	if _, _, err := textOf((deep), intArray); !errors.Is(err, format.ErrBeyondPostgres) || !strings.Contains(err.Error(), "more than 6 dimensions") {
		t.Errorf("a json array 10,000 deep: %v", err)
	}
	if got, _, err := textOf((`[[[[[[1]]]]]]`), intArray); err != nil || got != `{{{{{{"1"}}}}}}` {
		t.Errorf("6 dimensions: %q %v", got, err)
	}
	f := &field{Type: "int32"}
	for range 7 {
		f = &field{Type: "array", Items: f}
	}
	if _, _, err := connectText((`[]`), f); !errors.Is(err, format.ErrBeyondPostgres) {
		t.Errorf("a Connect array of 7 dimensions: %v", err)
	}
	if _, err := pgTypeOf(f); err == nil {
		t.Errorf("pgTypeOf of 7 dimensions: no error")
	}
	ts := &field{Type: "int64", Name: "io.debezium.time.Timestamp"}
	if _, _, err := connectText((`9223372036854775`), ts); err != nil {
		t.Errorf("the largest milliseconds: %v", err)
	}
	if got, _, err := connectText((`9223372036854776`), ts); !errors.Is(err, format.ErrBeyondPostgres) {
		t.Errorf("milliseconds past int64 microseconds: %q %v, want a permanent error", got, err)
	}
}

// textOf reads a plain JSON value as col's type.
func textOf(raw string, col *format.Column) (string, bool, error) {
	b, ok, err := Decoder{}.AppendText(nil, []byte(raw), col)
	return string(b), ok, err
}

// connectText reads a payload value under its field schema.
func connectText(raw string, f *field) (string, bool, error) {
	b, ok, err := readField{f}.AppendText(nil, []byte(raw))
	return string(b), ok, err
}
