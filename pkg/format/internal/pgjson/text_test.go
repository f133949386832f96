package pgjson

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzPlainString: the fast path for strings without escapes reads what encoding/json reads.
func FuzzPlainString(f *testing.F) {
	for _, s := range []string{`"a"`, `""`, `"\u0001"`, `"a\"b"`, `"😀"`, `"tab	"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want string
		if !plainString(raw) || json.Unmarshal(raw, &want) != nil {
			return
		}
		if got, _, _ := unquoted(raw); got != want && utf8.ValidString(got) {
			t.Errorf("unquoted(%q) = %q, encoding/json reads %q", raw, got, want)
		}
	})
}
