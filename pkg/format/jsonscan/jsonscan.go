// Package jsonscan reads JSON objects without copying or decoding them: the fields of an
// object as slices of it. The JSON formats' decoders read envelopes with it, and consumers read
// rows (pkg/consumer.Fields).
package jsonscan

import (
	"bytes"
	"encoding/json"
	"unsafe"
)

// Nullable returns nil for a JSON null, else b.
func Nullable(b []byte) []byte {
	if b == nil || string(b) == "null" {
		return nil
	}
	return b
}

// String returns a JSON string's text (unescaping only when needed), "" for anything else.
func String(b []byte) string {
	if len(b) < 2 || b[0] != '"' {
		return ""
	}
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b[1 : len(b)-1])
	}
	var s string
	_ = json.Unmarshal(b, &s)
	return s
}

// EachField calls fn with the name and the raw JSON value of each field of the JSON object b, in
// order, without copying: the name is valid only during the call, the value as long as b.
// Fields whose names carry escapes are skipped. It reports whether b is one well-formed object
// (values are matched by brackets, not validated).
func EachField(b []byte, fn func(name string, v []byte)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end, ok := skipString(b, i)
		if !ok {
			return false
		}
		name := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		vend, ok := skipValue(b, i)
		if !ok {
			return false
		}
		if bytes.IndexByte(name, '\\') < 0 {
			fn(UnsafeString(name), b[i:vend])
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the JSON string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index after the JSON value starting at b[i]. Nested objects and arrays
// are matched by brackets (strings skipped); scalars run to the next delimiter.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	return j, j > i
}

// UnsafeString views b as a string for parsing or comparing (no copy; never kept).
func UnsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// FirstFieldIs reports whether b is an object (after spaces) whose first field is named name:
// the cheap test a format uses to recognise its own records.
func FirstFieldIs(b []byte, name string) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	return len(b)-i >= len(name)+2 && b[i] == '"' && string(b[i+1:i+1+len(name)]) == name && b[i+1+len(name)] == '"'
}
