package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/tidemark/cdc/pkg/format/connectjson"
)

// Values reach PostgreSQL as text parameters of the target column's type ($n::<type>, sent in
// text format): PostgreSQL's own input function reads them, which is exact for every type
// whose JSON form is its text rendering (see pkg/codec's value mapping). Only what the envelope
// does not carry as PostgreSQL's text is converted here:
//
//   - json: bytea (base64 → \x hex), arrays (JSON arrays → array literals, elements by the
//     element type), json and jsonb (the embedded JSON itself), strings unquoted; numbers and
//     booleans as written.
//   - json-with-schema: Debezium's encodings by semantic name: decimals (unscaled two's
//     complement bytes and a scale), dates (days), timestamps and times (micro- or milliseconds,
//     Debezium's infinity sentinels), bytes; the string-typed ones as written. Debezium's
//     MicroDuration is not exact by Debezium's design (a month is 365.25/12 days, in doubles):
//     it is applied as that many microseconds. Bits, geometric structs and composites are
//     refused (use CDC_VALUE_FORMAT=json).

// textOf converts one column's JSON value (plain json format) to the text PostgreSQL reads for
// col; ok is false for SQL NULL.
func textOf(raw json.RawMessage, col *column) (s string, ok bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	switch {
	case col.isJSON:
		return string(raw), true, nil
	case col.elem != nil:
		if raw[0] != '[' {
			return unquoted(raw)
		}
		b, err := appendArray(nil, raw, col.elem)
		return string(b), true, err
	}
	b, err := appendScalar(nil, raw, col)
	return string(b), true, err
}

// appendText appends the text PostgreSQL reads for col from a column's JSON value: under its
// Connect field schema when f is set (json-with-schema), else as textOf. ok is false for SQL
// NULL (nothing appended).
func appendText(dst []byte, raw json.RawMessage, col *column, f *connectField) (_ []byte, ok bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return dst, false, nil
	}
	switch {
	case f != nil:
		dst, err = appendConnect(dst, raw, f)
	case col.isJSON:
		dst = append(dst, raw...)
	case col.elem != nil && raw[0] == '[':
		dst, err = appendArray(dst, raw, col.elem)
	case col.elem != nil:
		var s string
		if s, _, err = unquoted(raw); err == nil {
			dst = append(dst, s...)
		}
	default:
		dst, err = appendScalar(dst, raw, col)
	}
	return dst, err == nil, err
}

func unquoted(raw json.RawMessage) (string, bool, error) {
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
func appendScalar(dst []byte, raw json.RawMessage, col *column) ([]byte, error) {
	if col.isJSON {
		return append(dst, raw...), nil
	}
	if raw[0] != '"' {
		return append(dst, raw...), nil
	}
	if !col.isBytea && plainString(raw) {
		return append(dst, raw[1:len(raw)-1]...), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return dst, fmt.Errorf("read string: %w", err)
	}
	if col.isBytea {
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

// appendArray appends a PostgreSQL array literal of a JSON array (nested arrays are the inner
// dimensions, except for json elements, which are values).
func appendArray(dst []byte, raw json.RawMessage, elem *column) ([]byte, error) {
	return appendArrayAt(dst, raw, elem, 1)
}

// maxArrayDims is PostgreSQL's MAXDIM: an array nested deeper is refused before it is read
// further (each level would read what it holds again).
const maxArrayDims = 6

func appendArrayAt(dst []byte, raw json.RawMessage, elem *column, depth int) ([]byte, error) {
	if depth > maxArrayDims {
		return dst, fmt.Errorf("an array of more than %d dimensions, PostgreSQL's limit: %w", maxArrayDims, errPermanent)
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
		case it[0] == '[' && !elem.isJSON:
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

// connectField is a field of a Kafka Connect schema (json-with-schema).
type connectField struct {
	Type       string            `json:"type"`
	Name       string            `json:"name,omitempty"`
	Field      string            `json:"field,omitempty"`
	Optional   bool              `json:"optional"`
	Parameters map[string]string `json:"parameters,omitempty"`
	Items      *connectField     `json:"items,omitempty"`
	Fields     []connectField    `json:"fields,omitempty"`
}

const microsPerDay = 86_400_000_000

// connectText converts one column's value (json-with-schema payload) under its Connect field
// schema to PostgreSQL's text; ok is false for SQL NULL.
func connectText(raw json.RawMessage, f *connectField) (string, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	b, err := appendConnect(nil, raw, f)
	return string(b), err == nil, err
}

func appendConnect(dst []byte, raw json.RawMessage, f *connectField) ([]byte, error) {
	str := func() (string, error) {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	integer := func() (int64, error) { return strconv.ParseInt(string(raw), 10, 64) }
	switch f.Name {
	case "org.apache.kafka.connect.data.Decimal":
		s, err := str()
		if err != nil {
			return dst, fmt.Errorf("read decimal: %w", err)
		}
		scale, err := strconv.Atoi(f.Parameters["scale"])
		if err != nil {
			return dst, fmt.Errorf("decimal without a scale parameter")
		}
		return appendDecimal(dst, s, scale)
	case "io.debezium.data.VariableScaleDecimal":
		var v struct {
			Scale int    `json:"scale"`
			Value string `json:"value"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return dst, fmt.Errorf("read variable-scale decimal: %w", err)
		}
		return appendDecimal(dst, v.Value, v.Scale)
	case "io.debezium.time.Date":
		d, err := integer()
		if err != nil {
			return dst, fmt.Errorf("read date: %w", err)
		}
		switch d {
		case connectjson.DatePosInfinity:
			return append(dst, "infinity"...), nil
		case connectjson.DateNegInfinity:
			return append(dst, "-infinity"...), nil
		}
		return appendDate(dst, d, nil), nil
	case "io.debezium.time.MicroTimestamp", "io.debezium.time.Timestamp":
		v, err := integer()
		if err != nil {
			return dst, fmt.Errorf("read timestamp: %w", err)
		}
		unit := int64(1)
		if f.Name == "io.debezium.time.Timestamp" {
			unit = 1000
		}
		switch v {
		case connectjson.TimestampPosInfinity / unit:
			return append(dst, "infinity"...), nil
		case connectjson.TimestampNegInfinity / unit:
			return append(dst, "-infinity"...), nil
		}
		if v > math.MaxInt64/unit || v < math.MinInt64/unit {
			return dst, fmt.Errorf("timestamp %d ms is beyond any timestamp: %w", v, errPermanent)
		}
		micros := v * unit
		days, rem := micros/microsPerDay, micros%microsPerDay
		if rem < 0 {
			days, rem = days-1, rem+microsPerDay
		}
		return appendDate(dst, days, appendClock(nil, rem)), nil
	case "io.debezium.time.MicroTime", "io.debezium.time.Time":
		v, err := integer()
		if err != nil {
			return dst, fmt.Errorf("read time: %w", err)
		}
		if f.Name == "io.debezium.time.Time" {
			if v > math.MaxInt64/1000 || v < math.MinInt64/1000 {
				return dst, fmt.Errorf("time %d ms is beyond any time: %w", v, errPermanent)
			}
			v *= 1000
		}
		return append(dst, appendClock(nil, v)...), nil
	case "io.debezium.time.MicroDuration":
		v, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return dst, fmt.Errorf("read interval: %w", err)
		}
		return fmt.Appendf(dst, "%.0f microseconds", v), nil
	case "io.debezium.data.Bits", "io.debezium.data.geometry.Point", "io.debezium.data.geometry.Geometry",
		"io.debezium.data.geometry.Circle", "io.debezium.data.geometry.Line":
		return dst, fmt.Errorf("%s is not supported by tidemark-apply: use CDC_VALUE_FORMAT=json", f.Name)
	}
	switch f.Type {
	case "bytes":
		s, err := str()
		if err != nil {
			return dst, fmt.Errorf("read bytes: %w", err)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return dst, fmt.Errorf("read bytes: %w", err)
		}
		return appendHexBytea(dst, b), nil
	case "string":
		s, err := str()
		if err != nil {
			return dst, fmt.Errorf("read string: %w", err)
		}
		return append(dst, s...), nil
	case "array":
		if f.depth() > maxArrayDims {
			return dst, fmt.Errorf("an array of more than %d dimensions, PostgreSQL's limit: %w", maxArrayDims, errPermanent)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil || f.Items == nil {
			return dst, fmt.Errorf("read array: %v", err)
		}
		dst = append(dst, '{')
		for i, it := range items {
			if i > 0 {
				dst = append(dst, ',')
			}
			if string(bytes.TrimSpace(it)) == "null" {
				dst = append(dst, "NULL"...)
				continue
			}
			text, err := appendConnect(nil, it, f.Items)
			if err != nil {
				return dst, err
			}
			dst = appendQuotedElem(dst, text)
		}
		return append(dst, '}'), nil
	case "struct", "map":
		return dst, fmt.Errorf("a Connect %s (%s) is not supported by tidemark-apply: use CDC_VALUE_FORMAT=json", f.Type, f.Name)
	}
	return append(dst, raw...), nil // numbers, booleans
}

// appendDecimal appends the decimal of a base64 big-endian two's complement unscaled value.
// PostgreSQL's numeric holds up to 131,072 digits before the decimal point and 16,383 after:
// a decimal past those is refused before any work that grows with it.
const (
	numericMaxScale  = 16383
	numericMaxDigits = 131072 + numericMaxScale
	// numericMaxB64 bounds the base64 of the unscaled value: 2.408 digits a byte.
	numericMaxB64 = 4 * (numericMaxDigits/2 + 3) / 3
)

func appendDecimal(dst []byte, b64 string, scale int) ([]byte, error) {
	if scale > numericMaxScale || scale < -131072 || len(b64) > numericMaxB64 {
		return dst, fmt.Errorf("decimal with scale %d and %d bytes of base64 is beyond PostgreSQL's numeric (at most %d digits after the point, %d in all): %w",
			scale, len(b64), numericMaxScale, numericMaxDigits, errPermanent)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return dst, fmt.Errorf("read decimal: %w", err)
	}
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	s := n.String()
	if scale <= 0 {
		dst = append(dst, s...)
		for range -scale {
			dst = append(dst, '0')
		}
		return dst, nil
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if len(s) <= scale {
		s = strings.Repeat("0", scale-len(s)+1) + s
	}
	if neg {
		dst = append(dst, '-')
	}
	dst = append(dst, s[:len(s)-scale]...)
	dst = append(dst, '.')
	return append(dst, s[len(s)-scale:]...), nil
}

// appendDate appends the proleptic Gregorian date of days since 1970-01-01 (with clock, if
// any, after a space), years before 1 as PostgreSQL writes them: "0044-03-15 BC".
func appendDate(dst []byte, days int64, clock []byte) []byte {
	y, m, d := connectjson.CivilFromDays(days)
	bc := y <= 0
	if bc {
		y = 1 - y
	}
	dst = fmt.Appendf(dst, "%04d-%02d-%02d", y, m, d)
	if len(clock) > 0 {
		dst = append(append(dst, ' '), clock...)
	}
	if bc {
		dst = append(dst, " BC"...)
	}
	return dst
}

// appendClock appends HH:MM:SS.ffffff of microseconds since midnight.
func appendClock(dst []byte, micros int64) []byte {
	s := micros / 1_000_000
	return fmt.Appendf(dst, "%02d:%02d:%02d.%06d", s/3600, s/60%60, s%60, micros%1_000_000)
}

// pgTypeOf is the PostgreSQL type a created target column gets for a Connect field.
func pgTypeOf(f *connectField) (string, error) {
	switch f.Name {
	case "org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal":
		return "numeric", nil
	case "io.debezium.time.Date":
		return "date", nil
	case "io.debezium.time.MicroTimestamp", "io.debezium.time.Timestamp":
		return "timestamp", nil
	case "io.debezium.time.ZonedTimestamp":
		return "timestamptz", nil
	case "io.debezium.time.MicroTime", "io.debezium.time.Time":
		return "time", nil
	case "io.debezium.time.ZonedTime":
		return "timetz", nil
	case "io.debezium.time.MicroDuration":
		return "interval", nil
	case "io.debezium.data.Uuid":
		return "uuid", nil
	case "io.debezium.data.Json":
		return "jsonb", nil
	case "io.debezium.data.Xml":
		return "xml", nil
	case "io.debezium.data.Tsvector":
		return "tsvector", nil
	case "io.debezium.data.Enum", "io.debezium.data.Ltree":
		return "text", nil
	}
	switch f.Type {
	case "int8", "int16":
		return "smallint", nil
	case "int32":
		return "integer", nil
	case "int64":
		return "bigint", nil
	case "float", "float32":
		return "real", nil
	case "double", "float64":
		return "double precision", nil
	case "boolean":
		return "boolean", nil
	case "string":
		return "text", nil
	case "bytes":
		return "bytea", nil
	case "array":
		if f.Items == nil {
			return "", fmt.Errorf("array without items")
		}
		if f.depth() > maxArrayDims {
			return "", fmt.Errorf("an array of more than %d dimensions, PostgreSQL's limit", maxArrayDims)
		}
		t, err := pgTypeOf(f.Items)
		return t + "[]", err
	}
	return "", fmt.Errorf("no PostgreSQL type for Connect %s %s: create the table yourself", f.Type, f.Name)
}

// depth is how many arrays are nested in f, counting f (stopping past maxArrayDims).
func (f *connectField) depth() int {
	n := 0
	for g := f; g != nil && g.Type == "array" && n <= maxArrayDims; g = g.Items {
		n++
	}
	return n
}
