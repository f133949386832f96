package pgjson

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

func TestAppendValueArrays(t *testing.T) {
	tests := []struct {
		name string
		oid  uint32
		text string
		want string
	}{
		{name: "int4", oid: pgtype.Int4ArrayOID, text: `{1,2,3}`, want: `[1,2,3]`},
		{name: "empty", oid: pgtype.Int4ArrayOID, text: `{}`, want: `[]`},
		{name: "null elements", oid: pgtype.Int8ArrayOID, text: `{NULL,1,null}`, want: `[null,1,null]`},
		{name: "two dimensions", oid: pgtype.Int4ArrayOID, text: `{{1,2},{3,4}}`, want: `[[1,2],[3,4]]`},
		{name: "three dimensions", oid: pgtype.Int2ArrayOID, text: `{{{1},{2}},{{3},{4}}}`, want: `[[[1],[2]],[[3],[4]]]`},
		{name: "decoration dropped", oid: pgtype.Int4ArrayOID, text: `[0:1]={1,2}`, want: `[1,2]`},
		{name: "two-dimensional decoration", oid: pgtype.Int4ArrayOID, text: `[1:2][3:4]={{1,2},{3,4}}`, want: `[[1,2],[3,4]]`},
		{name: "spaces tolerated", oid: pgtype.Int4ArrayOID, text: `{ 1 , 2 }`, want: `[1,2]`},
		{name: "text quoting", oid: pgtype.TextArrayOID,
			text: `{"a b","q\"x","back\\slash","",NULL,"NULL","{}","x,y","tab	here"," lead","trail "}`,
			want: `["a b","q\"x","back\\slash","",null,"NULL","{}","x,y","tab\there"," lead","trail "]`},
		{name: "text unquoted", oid: pgtype.TextArrayOID, text: `{a,b,NuLl}`, want: `["a","b",null]`},
		{name: "text nested", oid: pgtype.TextArrayOID, text: `{{a,b},{"c}","d{"}}`, want: `[["a","b"],["c}","d{"]]`},
		{name: "text unicode", oid: pgtype.VarcharArrayOID, text: `{é,"😀 x"}`, want: `["é","😀 x"]`},
		{name: "text escaped backslash only", oid: pgtype.TextArrayOID, text: `{"\\"}`, want: `["\\"]`},
		{name: "unquoted escape", oid: pgtype.TextArrayOID, text: `{a\,b}`, want: `["a,b"]`},
		{name: "bpchar", oid: pgtype.BPCharArrayOID, text: `{"ab "}`, want: `["ab "]`},
		{name: "bool", oid: pgtype.BoolArrayOID, text: `{t,f,NULL}`, want: `[true,false,null]`},
		{name: "float8 specials", oid: pgtype.Float8ArrayOID, text: `{NaN,Infinity,-Infinity,-0,1e+100}`, want: `["NaN","Infinity","-Infinity",-0,1e+100]`},
		{name: "numeric", oid: pgtype.NumericArrayOID, text: `{1.5,NaN}`, want: `["1.5","NaN"]`},
		{name: "bytea", oid: pgtype.ByteaArrayOID, text: `{"\\x00ff","\\x"}`, want: `["AP8=",""]`},
		{name: "uuid", oid: pgtype.UUIDArrayOID, text: `{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}`, want: `["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]`},
		{name: "timestamp", oid: pgtype.TimestampArrayOID, text: `{"2024-01-31 12:34:56",infinity}`, want: `["2024-01-31T12:34:56","infinity"]`},
		{name: "timestamptz", oid: pgtype.TimestamptzArrayOID, text: `{"2024-01-31 12:34:56.123+00"}`, want: `["2024-01-31T12:34:56.123Z"]`},
		{name: "date", oid: pgtype.DateArrayOID, text: `{2024-01-31,"0044-03-15 BC"}`, want: `["2024-01-31","0044-03-15 BC"]`},
		{name: "interval", oid: pgtype.IntervalArrayOID, text: `{"1 day","-00:00:01"}`, want: `["1 day","-00:00:01"]`},
		{name: "jsonb", oid: pgtype.JSONBArrayOID, text: `{"{\"a\": \"é\"}","[1, 2]","null"}`, want: `[{"a": "é"},[1, 2],null]`},
		{name: "json null element is sql null", oid: pgtype.JSONArrayOID, text: `{NULL,"\"s\""}`, want: `[null,"s"]`},
		{name: "enum array falls back to string", oid: 16_386, text: `{happy,sad}`, want: `"{happy,sad}"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AppendValue(nil, tt.oid, []byte(tt.text))
			if err != nil {
				t.Fatalf("AppendValue(%d, %q): %v", tt.oid, tt.text, err)
			}
			if string(got) != tt.want {
				t.Fatalf("AppendValue(%d, %q)\n got %s\nwant %s", tt.oid, tt.text, got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatalf("output %s is not valid JSON", got)
			}
		})
	}
}

func TestAppendValueArrayErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
	}{
		{name: "empty", text: ``},
		{name: "no braces", text: `1,2`},
		{name: "unterminated", text: `{1,2`},
		{name: "unterminated quote", text: `{"a}`},
		{name: "junk after", text: `{1}x`},
		{name: "empty element", text: `{1,,2}`},
		{name: "trailing comma", text: `{1,}`},
		{name: "decoration without equals", text: `[0:1]{1}`},
		{name: "trailing backslash", text: `{a\`},
		{name: "too deep", text: `{{{{{{{1}}}}}}}`},
		{name: "quote inside unquoted", text: `{a"b"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AppendValue(nil, pgtype.TextArrayOID, []byte(tt.text))
			if !errors.Is(err, errArraySyntax) {
				t.Fatalf("AppendValue(%q) = %s, %v; want a malformed array error", tt.text, got, err)
			}
		})
	}
}
