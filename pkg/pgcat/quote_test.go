package pgcat

import (
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

func TestQuote(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"plain ident", Ident("t"), `"t"`},
		{"keyword ident", Ident("user"), `"user"`},
		{"ident with quote", Ident(`a"b`), `"a""b"`},
		{"table", Table(change.ExportID{Schema: "My Schema", Table: `t"1`}), `"My Schema"."t""1"`},
		{"plain literal", Literal("abc"), `'abc'`},
		{"literal with quote", Literal("it's"), `'it''s'`},
		{"literal with backslash", Literal(`a\'b`), `E'a\\''b'`},
		{"command literal keeps backslash", CommandLiteral(`"p\'q"`), `'"p\''q"'`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %s, want %s", tc.got, tc.want)
			}
		})
	}
}
