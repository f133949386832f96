package json

import (
	"errors"
	"strings"
	"testing"

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
			got, ok, err := textOf(tt.raw, tt.col)
			if err != nil {
				t.Fatal(err)
			}
			if ok == tt.null || got != tt.want {
				t.Errorf("textOf(%s) = %q, %v; want %q, null %v", tt.raw, got, ok, tt.want, tt.null)
			}
		})
	}
}

// TestHostileShapes: a JSON array nested past PostgreSQL's 6 dimensions is refused as beyond
// PostgreSQL's limits, not read level by level.
func TestHostileShapes(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	intArray := &format.Column{Elem: &format.Column{}}
	if _, _, err := textOf(deep, intArray); !errors.Is(err, format.ErrBeyondPostgres) || !strings.Contains(err.Error(), "more than 6 dimensions") {
		t.Errorf("a json array 10,000 deep: %v", err)
	}
	if got, _, err := textOf(`[[[[[[1]]]]]]`, intArray); err != nil || got != `{{{{{{"1"}}}}}}` {
		t.Errorf("6 dimensions: %q %v", got, err)
	}
}

// textOf reads a plain JSON value as col's type.
func textOf(raw string, col *format.Column) (string, bool, error) {
	b, ok, err := Decoder{}.AppendText(nil, []byte(raw), col)
	return string(b), ok, err
}
