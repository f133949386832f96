package codec

import (
	"errors"
	"testing"
)

func TestSplitCopyText(t *testing.T) {
	const null = "<NULL>"
	tests := []struct {
		name string
		line string
		want []string
	}{
		{name: "plain", line: "1\tabc\tx", want: []string{"1", "abc", "x"}},
		{name: "single field", line: "abc", want: []string{"abc"}},
		{name: "empty line is one empty field", line: "", want: []string{""}},
		{name: "empty fields", line: "\t\t", want: []string{"", "", ""}},
		{name: "null", line: `1\N` + "\t" + `\N`, want: []string{"1N", null}},
		{name: "null fields", line: `\N` + "\t" + `\N` + "\t" + `\N`, want: []string{null, null, null}},
		{name: "null last", line: "a\t" + `\N`, want: []string{"a", null}},
		{name: "text backslash N", line: `\\N` + "\t" + `x`, want: []string{`\N`, "x"}},
		{name: "backslash N inside text", line: `a\Nb`, want: []string{"aNb"}},
		{name: "longer than null", line: `\NN`, want: []string{"NN"}},
		{name: "backslash", line: `back\\slash`, want: []string{`back\slash`}},
		{name: "controls", line: `\t\n\r\b\f\v`, want: []string{"\t\n\r\b\f\v"}},
		{name: "backslash before raw tab is data", line: "a\\\tb\tc", want: []string{"a\tb", "c"}},
		{name: "escaped tab is not a separator", line: `a\tb` + "\tc", want: []string{"a\tb", "c"}},
		{name: "octal one digit", line: `\0`, want: []string{"\x00"}},
		{name: "octal two digits", line: `\12x`, want: []string{"\nx"}},
		{name: "octal three digits", line: `\101\1010`, want: []string{"AA0"}},
		{name: "octal high byte", line: `\377`, want: []string{"\xff"}},
		{name: "hex two digits", line: `\x41\x4a`, want: []string{"AJ"}},
		{name: "hex one digit", line: `\x9z`, want: []string{"\x09z"}},
		{name: "hex three digits takes two", line: `\x414`, want: []string{"A4"}},
		{name: "x without hex digit", line: `\xg`, want: []string{"xg"}},
		{name: "x at end", line: `a\x`, want: []string{"ax"}},
		{name: "other escaped char", line: `\.\a\"`, want: []string{`.a"`}},
		{name: "utf8 and raw control", line: "é\x01😀", want: []string{"é\x01😀"}},
		{name: "bytea as copy writes it", line: `\\x00ff` + "\t" + `\\x`, want: []string{`\x00ff`, `\x`}},
		{name: "many escapes then fields", line: `\\\\\\` + "\tb\t" + `\N` + "\tc", want: []string{`\\\`, "b", null, "c"}},
	}
	var fields [][]byte
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			fields, err = SplitCopyText([]byte(tt.line), fields)
			if err != nil {
				t.Fatalf("SplitCopyText(%q): %v", tt.line, err)
			}
			if len(fields) != len(tt.want) {
				t.Fatalf("SplitCopyText(%q) = %d fields %q, want %d", tt.line, len(fields), fields, len(tt.want))
			}
			for i, f := range fields {
				switch {
				case tt.want[i] == null && f != nil:
					t.Errorf("field %d = %q, want NULL", i, f)
				case tt.want[i] != null && f == nil:
					t.Errorf("field %d = NULL, want %q", i, tt.want[i])
				case tt.want[i] != null && string(f) != tt.want[i]:
					t.Errorf("field %d = %q, want %q", i, f, tt.want[i])
				}
			}
		})
	}
}

func TestSplitCopyTextFieldsDoNotOverlap(t *testing.T) {
	fields, err := SplitCopyText([]byte(`\\a`+"\t"+`b\\`+"\tc"), nil)
	if err != nil {
		t.Fatal(err)
	}
	fields[0] = append(fields[0], 'X') // must reallocate, not overwrite field 1
	if string(fields[1]) != `b\` || string(fields[2]) != "c" {
		t.Fatalf("appending to a field clobbered its neighbours: %q", fields)
	}
}

func TestSplitCopyTextTrailingBackslash(t *testing.T) {
	for _, line := range []string{`\`, `abc\`, "a\tb\\"} {
		if _, err := SplitCopyText([]byte(line), nil); !errors.Is(err, ErrCopyTrailingBackslash) {
			t.Errorf("SplitCopyText(%q): err = %v, want ErrCopyTrailingBackslash", line, err)
		}
	}
}
