package pgjson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/tidemark/cdc/pkg/format"
)

// Kind is how a type's text rendering maps onto JSON.
type Kind uint8

const (
	kindString      Kind = iota // JSON string of the rendering (also the fallback)
	kindInt                     // JSON number, integer grammar
	kindFloat                   // JSON number; NaN and ±Infinity as strings
	kindBool                    // t/f -> true/false
	kindBytea                   // \x hex (or escape format) -> base64 string
	kindTimestamp               // space -> T
	kindTimestamptz             // space -> T, +00 -> Z
	kindJSON                    // embedded raw JSON
	kindArray                   // PostgreSQL array literal -> JSON array
)

// KindOf maps a type OID to its Kind; unknown OIDs are kindString.
func KindOf(oid uint32) Kind {
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID:
		return kindInt
	case pgtype.Float4OID, pgtype.Float8OID:
		return kindFloat
	case pgtype.BoolOID:
		return kindBool
	case pgtype.ByteaOID:
		return kindBytea
	case pgtype.TimestampOID:
		return kindTimestamp
	case pgtype.TimestamptzOID:
		return kindTimestamptz
	case pgtype.JSONOID, pgtype.JSONBOID:
		return kindJSON
	}
	if _, ok := arrayElem(oid); ok {
		return kindArray
	}
	return kindString
}

// arrayElem returns the element type of the array types this package decodes.
func arrayElem(oid uint32) (uint32, bool) {
	switch oid {
	case pgtype.Int2ArrayOID:
		return pgtype.Int2OID, true
	case pgtype.Int4ArrayOID:
		return pgtype.Int4OID, true
	case pgtype.Int8ArrayOID:
		return pgtype.Int8OID, true
	case pgtype.OIDArrayOID:
		return pgtype.OIDOID, true
	case pgtype.NumericArrayOID:
		return pgtype.NumericOID, true
	case pgtype.Float4ArrayOID:
		return pgtype.Float4OID, true
	case pgtype.Float8ArrayOID:
		return pgtype.Float8OID, true
	case pgtype.BoolArrayOID:
		return pgtype.BoolOID, true
	case pgtype.TextArrayOID:
		return pgtype.TextOID, true
	case pgtype.VarcharArrayOID:
		return pgtype.VarcharOID, true
	case pgtype.BPCharArrayOID:
		return pgtype.BPCharOID, true
	case pgtype.NameArrayOID:
		return pgtype.NameOID, true
	case pgtype.QCharArrayOID:
		return pgtype.QCharOID, true
	case pgtype.ByteaArrayOID:
		return pgtype.ByteaOID, true
	case pgtype.UUIDArrayOID:
		return pgtype.UUIDOID, true
	case pgtype.DateArrayOID:
		return pgtype.DateOID, true
	case pgtype.TimeArrayOID:
		return pgtype.TimeOID, true
	case pgtype.TimetzArrayOID:
		return pgtype.TimetzOID, true
	case pgtype.TimestampArrayOID:
		return pgtype.TimestampOID, true
	case pgtype.TimestamptzArrayOID:
		return pgtype.TimestamptzOID, true
	case pgtype.IntervalArrayOID:
		return pgtype.IntervalOID, true
	case pgtype.JSONArrayOID:
		return pgtype.JSONOID, true
	case pgtype.JSONBArrayOID:
		return pgtype.JSONBOID, true
	}
	return 0, false
}

// AppendValue appends the JSON encoding of text, PostgreSQL's text rendering of a value of type
// typeOID, to dst. A nil text is SQL NULL and encodes as null. See the package documentation for
// the mapping. On error dst is returned unchanged: the text does not parse as its type (which
// PostgreSQL never renders; it means the OID and the value do not belong together).
func AppendValue(dst []byte, typeOID uint32, text []byte) ([]byte, error) {
	k := KindOf(typeOID)
	if k == kindArray {
		return AppendKind(dst, k, typeOID, text, new([]byte))
	}
	return AppendKind(dst, k, typeOID, text, nil) // scalars never use scratch
}

// AppendKind is AppendValue with a resolved Kind and a reusable scratch buffer (used to unescape
// array elements).
func AppendKind(dst []byte, k Kind, oid uint32, text []byte, scratch *[]byte) ([]byte, error) {
	if text == nil {
		return append(dst, "null"...), nil
	}
	switch k {
	case kindInt:
		if !isJSONInt(text) {
			return dst, fmt.Errorf("encode %s: %q is not an integer", typeName(oid), text)
		}
		return append(dst, text...), nil
	case kindFloat:
		return appendFloat(dst, oid, text)
	case kindBool:
		switch {
		case len(text) == 1 && text[0] == 't':
			return append(dst, "true"...), nil
		case len(text) == 1 && text[0] == 'f':
			return append(dst, "false"...), nil
		}
		return dst, fmt.Errorf("encode bool: %q is not t or f", text)
	case kindBytea:
		return appendBytea(dst, text)
	case kindTimestamp, kindTimestamptz:
		return appendTimestamp(dst, text, k == kindTimestamptz), nil
	case kindJSON:
		t := bytes.TrimSpace(text)
		if !utf8.Valid(t) || !json.Valid(t) {
			return dst, fmt.Errorf("encode %s: not valid JSON", typeName(oid))
		}
		return append(dst, t...), nil
	case kindArray:
		elem, _ := arrayElem(oid)
		return appendArray(dst, elem, text, scratch)
	}
	return AppendString(dst, text), nil
}

func typeName(oid uint32) string {
	switch oid {
	case pgtype.Int2OID:
		return "int2"
	case pgtype.Int4OID:
		return "int4"
	case pgtype.Int8OID:
		return "int8"
	case pgtype.OIDOID:
		return "oid"
	case pgtype.Float4OID:
		return "float4"
	case pgtype.Float8OID:
		return "float8"
	case pgtype.JSONOID:
		return "json"
	case pgtype.JSONBOID:
		return "jsonb"
	}
	return fmt.Sprintf("type %d", oid)
}

// isJSONInt reports whether b is -?(0|[1-9][0-9]*).
func isJSONInt(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || (b[0] == '0' && len(b) > 1) {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isJSONNumber reports whether b matches JSON's number grammar.
func isJSONNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - s
	}
	start := i
	n := digits()
	if n == 0 || (n > 1 && b[start] == '0') {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

func appendFloat(dst []byte, oid uint32, text []byte) ([]byte, error) {
	if isJSONNumber(text) {
		return append(dst, text...), nil
	}
	switch string(text) {
	case "NaN", "Infinity", "-Infinity":
		dst = append(dst, '"')
		dst = append(dst, text...)
		return append(dst, '"'), nil
	}
	return dst, fmt.Errorf("encode %s: %q is not a number", typeName(oid), text)
}

// appendTimestamp turns "2024-01-31 12:34:56.123456[+00][ BC]" into ISO-8601: the space between
// date and time becomes 'T' and, for timestamptz, a "+00" offset becomes "Z". Anything else
// (infinity, other offsets) is kept as rendered.
func appendTimestamp(dst []byte, text []byte, tz bool) []byte {
	sp := bytes.IndexByte(text, ' ')
	if sp <= 0 || sp+1 >= len(text) || text[sp+1] < '0' || text[sp+1] > '9' {
		return AppendString(dst, text)
	}
	dst = append(dst, '"')
	dst = appendEscaped(dst, text[:sp])
	dst = append(dst, 'T')
	rest := text[sp+1:]
	if tz {
		// The offset starts at the first '+' or '-' after the time.
		if i := bytes.IndexAny(rest, "+-"); i >= 0 {
			off, tail := rest[i:], []byte(nil)
			if j := bytes.IndexByte(off, ' '); j >= 0 {
				off, tail = off[:j], off[j:]
			}
			if string(off) == "+00" || string(off) == "-00" || string(off) == "+00:00" {
				dst = appendEscaped(dst, rest[:i])
				dst = append(dst, 'Z')
				dst = appendEscaped(dst, tail)
				return append(dst, '"')
			}
		}
	}
	dst = appendEscaped(dst, rest)
	return append(dst, '"')
}

// appendBytea decodes bytea's text output (hex format "\x0a1b", or the legacy escape format) and
// appends it as a base64 (standard alphabet, padded) JSON string.
func appendBytea(dst []byte, text []byte) ([]byte, error) {
	orig := len(dst)
	dst = append(dst, '"')
	var chunk [48]byte // a multiple of 3: padding only after the last chunk
	n := 0
	flush := func() {
		dst = base64.StdEncoding.AppendEncode(dst, chunk[:n])
		n = 0
	}
	if len(text) >= 2 && text[0] == '\\' && text[1] == 'x' {
		h := text[2:]
		if len(h)%2 != 0 {
			return dst[:orig], fmt.Errorf("encode bytea: odd number of hex digits")
		}
		for i := 0; i < len(h); i += 2 {
			hi, ok1 := unhex(h[i])
			lo, ok2 := unhex(h[i+1])
			if !ok1 || !ok2 {
				return dst[:orig], fmt.Errorf("encode bytea: invalid hex digit")
			}
			chunk[n] = hi<<4 | lo
			n++
			if n == len(chunk) {
				flush()
			}
		}
	} else {
		// Escape format: \\ is a backslash, \ooo an octal byte, anything else itself.
		for i := 0; i < len(text); i++ {
			c := text[i]
			if c == '\\' {
				switch {
				case i+1 < len(text) && text[i+1] == '\\':
					i++
				case i+3 < len(text) && isOctal(text[i+1]) && isOctal(text[i+2]) && isOctal(text[i+3]) && text[i+1] <= '3':
					c = (text[i+1]-'0')<<6 | (text[i+2]-'0')<<3 | (text[i+3] - '0')
					i += 3
				default:
					return dst[:orig], fmt.Errorf("encode bytea: invalid escape")
				}
			}
			chunk[n] = c
			n++
			if n == len(chunk) {
				flush()
			}
		}
	}
	flush()
	return append(dst, '"'), nil
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// AppendString appends s as a JSON string.
func AppendString(dst []byte, s []byte) []byte { return format.AppendJSONString(dst, s) }

// appendEscaped appends the body of a JSON string (no quotes).
func appendEscaped(dst []byte, s []byte) []byte { return format.AppendJSONEscaped(dst, s) }
