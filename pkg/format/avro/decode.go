package avro

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"sync"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/connectjson"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// Decoder reads Avro records: the 5-byte header, the writer schema fetched from the registry by
// its id (cached, parsed once), and the datum. Row images and keys come out as JSON objects
// whose values are written as the json format writes them (numeric, dates and times as
// PostgreSQL text, bytea in base64, json embedded), so a consumer reads them as it reads json.
// It is safe for concurrent use.
type Decoder struct {
	reg *schemareg.Client
	// Timeout bounds the fetch of a schema the decoder has not seen [30s].
	timeout time.Duration
	parsed  sync.Map // schemareg.ID → *snode
	rows    sync.Map // schemareg.ID → *rowSchema (Schema)
}

// NewDecoder returns a decoder that fetches writer schemas from reg.
func NewDecoder(reg *schemareg.Client) *Decoder { return &Decoder{reg: reg, timeout: 30 * time.Second} }

// Decoder returns a decoder without a registry, which recognizes Avro records and refuses to
// read them: a consumer that reads Avro builds one with NewDecoder.
func (Format) Decoder() format.Decoder { return &Decoder{} }

// DecoderWith returns the decoder that fetches writer schemas from reg (pkg/format/formats'
// Decoders uses it).
func (Format) DecoderWith(reg *schemareg.Client) format.Decoder { return NewDecoder(reg) }

// Recognizes reports whether value starts with Confluent's magic byte and a schema id.
func (d *Decoder) Recognizes(value []byte) bool { return len(value) >= headerSize && value[0] == magic }

// writerSchema returns the parsed schema of a framed record, and its datum.
func (d *Decoder) writerSchema(b []byte) (*snode, []byte, error) {
	id, body, err := splitHeader(b)
	if err != nil {
		return nil, nil, err
	}
	n, err := d.schemaByID(id)
	return n, body, err
}

// schemaByID returns the parsed writer schema of id, fetched from the registry once.
func (d *Decoder) schemaByID(id schemareg.ID) (*snode, error) {
	if n, ok := d.parsed.Load(id); ok {
		return n.(*snode), nil
	}
	if d.reg == nil {
		return nil, ErrNoRegistry
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	s, err := d.reg.Schema(ctx, id)
	if err != nil {
		return nil, err
	}
	n, err := parseSchema(s.Schema)
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	d.parsed.Store(id, n)
	return n, nil
}

// Decode reads the envelope value and the key. The images and the key are new JSON, not slices
// of value and key.
func (d *Decoder) Decode(r *format.Record, key, value []byte) error {
	*r = format.Record{}
	n, body, err := d.writerSchema(value)
	if err != nil {
		return fmt.Errorf("%w: %w", format.ErrEnvelope, err)
	}
	if n.typ != "record" {
		return fmt.Errorf("%w: the value's schema is not a record", format.ErrEnvelope)
	}
	var w walker
	var src struct {
		Version, Connector, Name, DB, Schema, Table string
		LSN                                         int64  `json:"lsn"`
		TxID                                        uint32 `json:"txId"`
		Sequence                                    int64
		Snapshot                                    string
		Attempt                                     int
		TsMs                                        int64 `json:"ts_ms"`
	}
	op := ""
	for _, f := range n.fields {
		var v []byte
		if v, body, err = w.value(nil, f.typ, body); err != nil {
			return fmt.Errorf("%w: field %s: %w", format.ErrEnvelope, f.name, err)
		}
		switch f.name {
		case "before":
			r.Before = nullable(v)
		case "after":
			r.After = nullable(v)
		case "source":
			if err := json.Unmarshal(v, &src); err != nil {
				return fmt.Errorf("%w: source: %w", format.ErrEnvelope, err)
			}
		case "op":
			_ = json.Unmarshal(v, &op)
		}
	}
	if len(op) != 1 {
		return fmt.Errorf("%w: no op", format.ErrEnvelope)
	}
	r.Op = change.Op(op[0])
	switch r.Op {
	case change.OpRead, change.OpCreate, change.OpUpdate, change.OpDelete, change.OpTruncate:
	default:
		return fmt.Errorf("%w: unknown op %q", format.ErrEnvelope, op)
	}
	r.Schema = value[1:headerSize] // the writer schema's id: Schema reads the row's columns from it
	r.Source = format.RecordSource{LSN: change.LSN(src.LSN), TxID: src.TxID, Sequence: src.Sequence, TsMs: src.TsMs,
		Attempt: src.Attempt, Snapshot: src.Snapshot == "true" || r.Op == change.OpRead, DB: src.DB, Schema: src.Schema, Table: src.Table}
	if key != nil {
		if r.Key, err = d.keyJSON(key); err != nil {
			return fmt.Errorf("%w: key: %w", format.ErrEnvelope, err)
		}
	}
	return nil
}

func nullable(v []byte) []byte {
	if string(v) == "null" {
		return nil
	}
	return v
}

func (d *Decoder) keyJSON(key []byte) ([]byte, error) {
	n, body, err := d.writerSchema(key)
	if err != nil {
		return nil, err
	}
	var w walker
	v, rest, err := w.value(nil, n, body)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d bytes after the datum", len(rest))
	}
	return v, nil
}

// Key returns the key columns of an Avro key as a JSON object; nil for nil or a key it cannot
// read.
func (d *Decoder) Key(key []byte) []byte {
	if key == nil {
		return nil
	}
	v, err := d.keyJSON(key)
	if err != nil {
		return nil
	}
	return v
}

// AppendText appends the PostgreSQL text of a value of an image, as the json format reads it.
func (d *Decoder) AppendText(dst, raw []byte, col *format.Column) ([]byte, bool, error) {
	return pgjson.AppendText(dst, raw, col)
}

// AppendJSON appends the datum of an Avro key or value as JSON; b itself when it cannot read it.
func (d *Decoder) AppendJSON(dst, b []byte) []byte {
	n, body, err := d.writerSchema(b)
	if err != nil {
		return append(dst, b...)
	}
	var w walker
	out, _, err := w.value(dst, n, body)
	if err != nil {
		return append(dst, b...)
	}
	return out
}

// walker writes Avro datums as JSON.
type walker struct{ depth int }

var errTrunc = fmt.Errorf("datum cut short")

func (w *walker) value(dst []byte, n *snode, b []byte) ([]byte, []byte, error) {
	w.depth++
	defer func() { w.depth-- }()
	if w.depth > 64 {
		return dst, b, fmt.Errorf("datum nested too deep")
	}
	switch n.typ {
	case "null":
		return append(dst, "null"...), b, nil
	case "boolean":
		if len(b) < 1 {
			return dst, b, errTrunc
		}
		if n.pgType == "bit" {
			return append(dst, '"', '0'+b[0], '"'), b[1:], nil
		}
		return strconv.AppendBool(dst, b[0] != 0), b[1:], nil
	case "int", "long":
		v, m := readLong(b)
		if m == 0 {
			return dst, b, errTrunc
		}
		return appendLongJSON(dst, n, v), b[m:], nil
	case "float", "double":
		var f float64
		if n.typ == "float" {
			if len(b) < 4 {
				return dst, b, errTrunc
			}
			f, b = float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), b[4:]
		} else {
			if len(b) < 8 {
				return dst, b, errTrunc
			}
			f, b = math.Float64frombits(binary.LittleEndian.Uint64(b)), b[8:]
		}
		switch {
		case math.IsNaN(f):
			return append(dst, `"NaN"`...), b, nil
		case math.IsInf(f, 1):
			return append(dst, `"Infinity"`...), b, nil
		case math.IsInf(f, -1):
			return append(dst, `"-Infinity"`...), b, nil
		}
		bits := 64
		if n.typ == "float" {
			bits = 32
		}
		return strconv.AppendFloat(dst, f, 'g', -1, bits), b, nil
	case "bytes", "string", "fixed":
		var v []byte
		if n.typ == "fixed" {
			if len(b) < n.length {
				return dst, b, errTrunc
			}
			v, b = b[:n.length], b[n.length:]
		} else {
			l, m := readLong(b)
			if m == 0 || l < 0 || int64(len(b)-m) < l {
				return dst, b, errTrunc
			}
			v, b = b[m:m+int(l)], b[m+int(l):]
		}
		return appendBytesJSON(dst, n, v), b, nil
	case "enum":
		i, m := readLong(b)
		if m == 0 || i < 0 || int(i) >= len(n.symbols) {
			return dst, b, errTrunc
		}
		return format.AppendJSONString(dst, []byte(n.symbols[i])), b[m:], nil
	case "union":
		i, m := readLong(b)
		if m == 0 || i < 0 || int(i) >= len(n.branches) {
			return dst, b, fmt.Errorf("union branch %d out of range", i)
		}
		return w.value(dst, n.branches[i], b[m:])
	case "record":
		if n.connect == varDecName && len(n.fields) == 2 {
			scale, m := readLong(b)
			if m == 0 {
				return dst, b, errTrunc
			}
			b = b[m:]
			l, m := readLong(b)
			if m == 0 || l < 0 || int64(len(b)-m) < l {
				return dst, b, errTrunc
			}
			dst = append(dst, '"')
			dst = appendDecimalText(dst, b[m:m+int(l)], int(scale))
			return append(dst, '"'), b[m+int(l):], nil
		}
		dst = append(dst, '{')
		var err error
		for i, f := range n.fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			name := f.name
			if f.column != "" {
				name = f.column
			}
			dst = format.AppendJSONString(dst, []byte(name))
			dst = append(dst, ':')
			if dst, b, err = w.value(dst, f.typ, b); err != nil {
				return dst, b, err
			}
		}
		return append(dst, '}'), b, nil
	case "array", "map":
		open, end := byte('['), byte(']')
		if n.typ == "map" {
			open, end = '{', '}'
		}
		dst = append(dst, open)
		first := true
		for {
			cnt, m := readLong(b)
			if m == 0 {
				return dst, b, errTrunc
			}
			b = b[m:]
			if cnt == 0 {
				return append(dst, end), b, nil
			}
			if cnt < 0 {
				_, m := readLong(b)
				if m == 0 {
					return dst, b, errTrunc
				}
				b, cnt = b[m:], -cnt
			}
			for range cnt {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				var err error
				if n.typ == "map" {
					l, m := readLong(b)
					if m == 0 || l < 0 || int64(len(b)-m) < l {
						return dst, b, errTrunc
					}
					dst = format.AppendJSONString(dst, b[m:m+int(l)])
					dst = append(dst, ':')
					b = b[m+int(l):]
				}
				if dst, b, err = w.value(dst, n.items, b); err != nil {
					return dst, b, err
				}
			}
		}
	}
	return dst, b, fmt.Errorf("type %q", n.typ)
}

// appendLongJSON writes an int or long: dates, times and timestamps as PostgreSQL text, the
// others as numbers.
func appendLongJSON(dst []byte, n *snode, v int64) []byte {
	switch {
	case n.logical == "date" || n.connect == "io.debezium.time.Date":
		switch v {
		case connectjson.DatePosInfinity:
			return append(dst, `"infinity"`...)
		case connectjson.DateNegInfinity:
			return append(dst, `"-infinity"`...)
		}
		dst = append(dst, '"')
		dst = appendCivil(dst, v)
		return append(dst, '"')
	case n.logical == "time-millis" || n.connect == "io.debezium.time.Time":
		dst = append(dst, '"')
		dst = appendClockText(dst, v*1000)
		return append(dst, '"')
	case n.logical == "time-micros" || n.connect == "io.debezium.time.MicroTime":
		dst = append(dst, '"')
		dst = appendClockText(dst, v)
		return append(dst, '"')
	case n.logical == "timestamp-millis" || n.logical == "timestamp-micros" ||
		n.connect == "io.debezium.time.Timestamp" || n.connect == "io.debezium.time.MicroTimestamp":
		milli := n.logical == "timestamp-millis" || n.connect == "io.debezium.time.Timestamp"
		switch {
		case v == connectjson.TimestampPosInfinity || milli && v == connectjson.TimestampPosInfinity/1000:
			return append(dst, `"infinity"`...)
		case v == connectjson.TimestampNegInfinity || milli && v == connectjson.TimestampNegInfinity/1000:
			return append(dst, `"-infinity"`...)
		}
		if milli {
			v *= 1000
		}
		days, clock := v/86_400_000_000, v%86_400_000_000
		if clock < 0 {
			days--
			clock += 86_400_000_000
		}
		dst = append(dst, '"')
		y, _, _ := connectjson.CivilFromDays(days)
		dst = appendCivil(dst, days)
		if y <= 0 {
			dst = dst[:len(dst)-3] // " BC" goes after the time
		}
		dst = append(dst, 'T')
		dst = appendClockText(dst, clock)
		if y <= 0 {
			dst = append(dst, " BC"...)
		}
		return append(dst, '"')
	case n.connect == "io.debezium.time.MicroDuration":
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, v, 10)
		return append(dst, ` microseconds"`...)
	}
	return strconv.AppendInt(dst, v, 10)
}

// appendCivil appends the date of days since the epoch as PostgreSQL writes it: "2024-01-31",
// "0044-03-15 BC".
func appendCivil(dst []byte, days int64) []byte {
	y, m, d := connectjson.CivilFromDays(days)
	bc := y <= 0
	if bc {
		y = 1 - y
	}
	for p := int64(1000); p > 1 && y < p; p /= 10 {
		dst = append(dst, '0')
	}
	dst = strconv.AppendInt(dst, y, 10)
	dst = append(dst, '-', byte('0'+m/10), byte('0'+m%10), '-', byte('0'+d/10), byte('0'+d%10))
	if bc {
		dst = append(dst, " BC"...)
	}
	return dst
}

// appendClockText appends microseconds past midnight as "HH:MM:SS[.ffffff]".
func appendClockText(dst []byte, us int64) []byte {
	s := us / 1_000_000
	dst = append(dst, byte('0'+s/36000), byte('0'+s/3600%10), ':', byte('0'+s/600%6), byte('0'+s/60%10), ':', byte('0'+s%60/10), byte('0'+s%10))
	if f := us % 1_000_000; f != 0 {
		var buf [7]byte
		buf[0] = '.'
		for i := 6; i >= 1; i-- {
			buf[i] = byte('0' + f%10)
			f /= 10
		}
		n := 7
		for buf[n-1] == '0' {
			n--
		}
		dst = append(dst, buf[:n]...)
	}
	return dst
}

// appendBytesJSON writes bytes and strings: decimals as their digits, Debezium's JSON strings as
// the embedded document, bit strings as their bits, other bytes in base64, strings as strings.
func appendBytesJSON(dst []byte, n *snode, v []byte) []byte {
	switch {
	case n.logical == "decimal" || n.connect == "org.apache.kafka.connect.data.Decimal":
		dst = append(dst, '"')
		dst = appendDecimalText(dst, v, n.scale)
		return append(dst, '"')
	case n.connect == "io.debezium.data.Json" && json.Valid(v):
		return append(dst, v...)
	case n.connect == "io.debezium.data.Bits":
		dst = append(dst, '"')
		bits := len(v) * 8
		if n.length > 0 && n.length < 1<<20 {
			bits = n.length
		} else {
			for bits > 1 && (bits-1)/8 < len(v) && v[(bits-1)/8]&(1<<((bits-1)%8)) == 0 {
				bits--
			}
		}
		for i := bits - 1; i >= 0; i-- {
			if i/8 < len(v) && v[i/8]&(1<<(i%8)) != 0 {
				dst = append(dst, '1')
			} else {
				dst = append(dst, '0')
			}
		}
		return append(dst, '"')
	case n.connect == "io.debezium.time.ZonedTimestamp" && len(v) > 0 && (v[0] == '-' || bytes.HasPrefix(v, []byte("0000-"))):
		return format.AppendJSONString(dst, connectjson.AppendZonedTimestampText(nil, v))
	case n.typ == "string":
		return format.AppendJSONString(dst, v)
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, v)
	return append(dst, '"')
}

// appendDecimalText appends the two's complement big-endian unscaled value b at scale as
// numeric text: "-12.50".
func appendDecimalText(dst []byte, b []byte, scale int) []byte {
	x := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if x.Sign() < 0 {
		dst = append(dst, '-')
		x.Neg(x)
	}
	digits := x.Text(10)
	if scale <= 0 {
		dst = append(dst, digits...)
		for range -scale {
			dst = append(dst, '0')
		}
		return dst
	}
	for len(digits) <= scale {
		digits = "0" + digits
	}
	dst = append(dst, digits[:len(digits)-scale]...)
	dst = append(dst, '.')
	return append(dst, digits[len(digits)-scale:]...)
}
