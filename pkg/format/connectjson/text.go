package connectjson

// Reading values back: the PostgreSQL text of a json-with-schema payload value, by its Connect
// field schema. Debezium's encodings are read by semantic name: decimals (unscaled two's
// complement bytes and a scale), dates (days), timestamps and times (micro- or milliseconds,
// Debezium's infinity sentinels), bytes; the string-typed ones as written. Debezium's
// MicroDuration is not exact by Debezium's design (a month is 365.25/12 days, in doubles): it
// is read as that many microseconds. Bits, geometric structs and composites are refused (use
// CDC_VALUE_FORMAT=json).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
)

// field is a field of a Kafka Connect schema (json-with-schema).
type field struct {
	Type       string            `json:"type"`
	Name       string            `json:"name,omitempty"`
	Field      string            `json:"field,omitempty"`
	Optional   bool              `json:"optional"`
	Parameters map[string]string `json:"parameters,omitempty"`
	Items      *field            `json:"items,omitempty"`
	Fields     []field           `json:"fields,omitempty"`
}

func appendConnect(dst []byte, raw []byte, f *field) ([]byte, error) {
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
		case DatePosInfinity:
			return append(dst, "infinity"...), nil
		case DateNegInfinity:
			return append(dst, "-infinity"...), nil
		}
		return textDate(dst, d, nil), nil
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
		case TimestampPosInfinity / unit:
			return append(dst, "infinity"...), nil
		case TimestampNegInfinity / unit:
			return append(dst, "-infinity"...), nil
		}
		if v > math.MaxInt64/unit || v < math.MinInt64/unit {
			return dst, fmt.Errorf("timestamp %d ms is beyond any timestamp: %w", v, format.ErrBeyondPostgres)
		}
		micros := v * unit
		days, rem := micros/microsPerDay, micros%microsPerDay
		if rem < 0 {
			days, rem = days-1, rem+microsPerDay
		}
		return textDate(dst, days, textClock(nil, rem)), nil
	case "io.debezium.time.MicroTime", "io.debezium.time.Time":
		v, err := integer()
		if err != nil {
			return dst, fmt.Errorf("read time: %w", err)
		}
		if f.Name == "io.debezium.time.Time" {
			if v > math.MaxInt64/1000 || v < math.MinInt64/1000 {
				return dst, fmt.Errorf("time %d ms is beyond any time: %w", v, format.ErrBeyondPostgres)
			}
			v *= 1000
		}
		return append(dst, textClock(nil, v)...), nil
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
		return pgjson.AppendHexBytea(dst, b), nil
	case "string":
		s, err := str()
		if err != nil {
			return dst, fmt.Errorf("read string: %w", err)
		}
		if f.Name == "io.debezium.time.ZonedTimestamp" {
			return AppendZonedTimestampText(dst, []byte(s)), nil
		}
		return append(dst, s...), nil
	case "array":
		if f.depth() > pgjson.MaxArrayDims {
			return dst, fmt.Errorf("an array of more than %d dimensions, PostgreSQL's limit: %w", pgjson.MaxArrayDims, format.ErrBeyondPostgres)
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
			dst = pgjson.AppendQuotedElem(dst, text)
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
			scale, len(b64), numericMaxScale, numericMaxDigits, format.ErrBeyondPostgres)
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

// textDate appends the proleptic Gregorian date of days since 1970-01-01 (with clock, if
// any, after a space), years before 1 as PostgreSQL writes them: "0044-03-15 BC".
func textDate(dst []byte, days int64, clock []byte) []byte {
	y, m, d := CivilFromDays(days)
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

// textClock appends HH:MM:SS.ffffff of microseconds since midnight.
func textClock(dst []byte, micros int64) []byte {
	s := micros / 1_000_000
	return fmt.Appendf(dst, "%02d:%02d:%02d.%06d", s/3600, s/60%60, s%60, micros%1_000_000)
}

// pgTypeOf is the PostgreSQL type a created target column gets for a Connect field.
func pgTypeOf(f *field) (string, error) {
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
		if f.depth() > pgjson.MaxArrayDims {
			return "", fmt.Errorf("an array of more than %d dimensions, PostgreSQL's limit", pgjson.MaxArrayDims)
		}
		t, err := pgTypeOf(f.Items)
		return t + "[]", err
	}
	return "", fmt.Errorf("no PostgreSQL type for Connect %s %s: create the table yourself", f.Type, f.Name)
}

// depth is how many arrays are nested in f, counting f (stopping past pgjson.MaxArrayDims).
func (f *field) depth() int {
	n := 0
	for g := f; g != nil && g.Type == "array" && n <= pgjson.MaxArrayDims; g = g.Items {
		n++
	}
	return n
}
