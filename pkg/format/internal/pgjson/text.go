package pgjson

// Reading values back: the PostgreSQL text of a plain JSON value (the json format, and columns a
// json-with-schema record's schema does not describe), by the type of the column it goes into.
// PostgreSQL's own input function reads the text, which is exact for every type whose JSON form
// is its text rendering; only bytea (base64 → \x hex), arrays (JSON arrays → array literals,
// elements by the element type), json and jsonb (the embedded JSON itself) and strings (unquoted)
// are converted.

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/tidemark/cdc/pkg/format"
)

// AppendText appends the text PostgreSQL reads for col from a column's JSON value; ok is false
// for SQL NULL (nothing appended).
func AppendText(dst, raw []byte, col *format.Column) (_ []byte, ok bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return dst, false, nil
	}
	switch {
	case col.IsJSON:
		dst = append(dst, raw...)
	case col.Elem != nil && raw[0] == '[':
		dst, err = appendJSONArray(dst, raw, col.Elem)
	case col.Elem != nil:
		var s string
		if s, _, err = unquoted(raw); err == nil {
			dst = append(dst, s...)
		}
	default:
		dst, err = appendScalar(dst, raw, col)
	}
	return dst, err == nil, err
}

// AppendHexBytea appends b as bytea's hex text: \x0a1b.
func AppendHexBytea(dst, b []byte) []byte { return appendHexBytea(dst, b) }

// AppendQuotedElem appends an array element's text in double quotes, backslashes and quotes
// escaped.
func AppendQuotedElem(dst, text []byte) []byte { return appendQuotedElem(dst, text) }

// MaxArrayDims is PostgreSQL's MAXDIM.
const MaxArrayDims = maxArrayDims

func unquoted(raw []byte) (string, bool, error) {
	if raw[0] != '"' {
		return string(raw), true, nil
	}
	if plainString(raw) {
		return string(raw[1 : len(raw)-1]), true, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, fmt.Errorf("read string: %w", err)
	}
	return s, true, nil
}

// appendScalar appends the text of a non-null scalar.
func appendScalar(dst []byte, raw []byte, col *format.Column) ([]byte, error) {
	if col.IsJSON {
		return append(dst, raw...), nil
	}
	if raw[0] != '"' {
		return append(dst, raw...), nil
	}
	if !col.IsBytea && plainString(raw) {
		return append(dst, raw[1:len(raw)-1]...), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return dst, fmt.Errorf("read string: %w", err)
	}
	if col.IsBytea {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return dst, fmt.Errorf("read bytea: %w", err)
		}
		return appendHexBytea(dst, b), nil
	}
	return append(dst, s...), nil
}

// plainString reports whether raw is a JSON string without escapes: its text is what lies
// between the quotes (cdc escapes every control character, quote and backslash).
func plainString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c == '\\' || c == '"' || c < 0x20 {
			return false
		}
	}
	return true
}

func appendHexBytea(dst, b []byte) []byte {
	dst = append(dst, `\x`...)
	return hex.AppendEncode(dst, b)
}

// appendJSONArray appends a PostgreSQL array literal of a JSON array (nested arrays are the inner
// dimensions, except for json elements, which are values).
func appendJSONArray(dst []byte, raw []byte, elem *format.Column) ([]byte, error) {
	return appendArrayAt(dst, raw, elem, 1)
}

// maxArrayDims is PostgreSQL's MAXDIM: an array nested deeper is refused before it is read
// further (each level would read what it holds again).
const maxArrayDims = 6

func appendArrayAt(dst []byte, raw []byte, elem *format.Column, depth int) ([]byte, error) {
	if depth > maxArrayDims {
		return dst, fmt.Errorf("an array of more than %d dimensions, PostgreSQL's limit: %w", maxArrayDims, format.ErrBeyondPostgres)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return dst, fmt.Errorf("read array: %w", err)
	}
	dst = append(dst, '{')
	for i, it := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		it = bytes.TrimSpace(it)
		switch {
		case string(it) == "null":
			dst = append(dst, "NULL"...)
		case it[0] == '[' && !elem.IsJSON:
			var err error
			if dst, err = appendArrayAt(dst, it, elem, depth+1); err != nil {
				return dst, err
			}
		default:
			text, err := appendScalar(nil, it, elem)
			if err != nil {
				return dst, err
			}
			dst = appendQuotedElem(dst, text)
		}
	}
	return append(dst, '}'), nil
}

// appendQuotedElem appends an array element in double quotes, backslashes and quotes escaped.
func appendQuotedElem(dst, text []byte) []byte {
	dst = append(dst, '"')
	for _, c := range text {
		if c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return append(dst, '"')
}
