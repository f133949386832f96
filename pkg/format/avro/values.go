package avro

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"

	"github.com/tidemark/cdc/pkg/format/connectjson"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
)

// converter holds the reusable buffers of value conversion.
type converter struct {
	num   []byte // decimal digits; zoned timestamps
	elems []elem // array elements of the value being converted
	text  []byte // unescaped array element texts
	// shape is the dimension decoration of the last array converted when it is not one
	// dimension starting at 1 ("[0:2]", "[1:2][1:3]"), else empty.
	shape []byte
}

// appendValue appends the Avro encoding of text (not nil), a value of n's type.
func (c *converter) appendValue(dst []byte, n *node, text []byte) ([]byte, error) {
	out, err := c.convert(dst, n, text)
	if err != nil {
		return dst, fmt.Errorf("encode %s: %w", n.label, err)
	}
	return out, nil
}

func (c *converter) convert(dst []byte, n *node, text []byte) ([]byte, error) {
	switch n.kind {
	case kString:
		return appendBytes(dst, text), nil
	case kBool:
		switch {
		case len(text) == 1 && text[0] == 't':
			return append(dst, 1), nil
		case len(text) == 1 && text[0] == 'f':
			return append(dst, 0), nil
		}
		return dst, fmt.Errorf("%q is not t or f", text)
	case kInt, kLong:
		v, ok := parseInt(text)
		if !ok || n.kind == kInt && (v < math.MinInt32 || v > math.MaxInt32) {
			return dst, fmt.Errorf("%q is not an integer", text)
		}
		return appendLong(dst, v), nil
	case kFloat:
		f, err := strconv.ParseFloat(string(text), 32)
		if err != nil {
			return dst, fmt.Errorf("%q is not a number", text)
		}
		return appendFloat(dst, float32(f)), nil
	case kDouble:
		f, err := strconv.ParseFloat(string(text), 64)
		if err != nil {
			return dst, fmt.Errorf("%q is not a number", text)
		}
		return appendDouble(dst, f), nil
	case kDecimal:
		return c.appendDecimal(dst, n.precision, n.scale, text)
	case kVarDecimal:
		neg, intPart, frac, err := connectjson.ParseNumeric(text)
		if err != nil {
			return dst, err
		}
		c.num = append(append(c.num[:0], intPart...), frac...)
		dst = appendLong(dst, int64(len(frac)))
		return appendUnscaled(dst, neg, c.num)
	case kMoney:
		return c.appendMoney(dst, text)
	case kBytea:
		return appendBytea(dst, text)
	case kBit1:
		switch string(text) {
		case "1":
			return append(dst, 1), nil
		case "0":
			return append(dst, 0), nil
		}
		return dst, fmt.Errorf("%q is not one bit", text)
	case kBits:
		return appendBits(dst, text)
	case kDate:
		d, err := connectjson.DateDays(text)
		if err != nil {
			return dst, err
		}
		return appendLong(dst, int64(d)), nil
	case kTimeMilli, kTimeMicro:
		us, err := connectjson.TimeMicros(text, n.kind == kTimeMilli)
		if err != nil {
			return dst, err
		}
		return appendLong(dst, us), nil
	case kTimestampMilli, kTimestampMicro:
		us, ok := fastTimestamp(text)
		if ok && n.kind == kTimestampMilli {
			us /= 1000
		}
		if !ok {
			var err error
			if us, err = connectjson.TimestampMicros(text, n.kind == kTimestampMilli); err != nil {
				return dst, err
			}
		}
		return appendLong(dst, us), nil
	case kZonedTimestamp, kZonedTime:
		var err error
		if n.kind == kZonedTimestamp {
			if iso, ok := fastZoned(text, c.num[:0]); ok {
				c.num = iso
				return appendBytes(dst, iso), nil
			}
			c.num, err = connectjson.AppendZonedTimestamp(c.num[:0], text)
		} else {
			c.num, err = connectjson.AppendZonedTime(c.num[:0], text)
		}
		if err != nil {
			return dst, err
		}
		return appendBytes(dst, c.num), nil
	case kInterval:
		us, err := connectjson.IntervalMicros(text)
		if err != nil {
			return dst, err
		}
		return appendLong(dst, us), nil
	case kJSON:
		return appendBytes(dst, bytes.TrimSpace(text)), nil
	case kArray:
		return c.appendArray(dst, n, text)
	}
	return dst, fmt.Errorf("no conversion")
}

// fastTimestamp parses the common rendering "YYYY-MM-DD HH:MM:SS[.f{1,6}]" (a year of four
// digits, AD) into microseconds since the epoch; ok is false for every other text, which
// connectjson.TimestampMicros parses.
func fastTimestamp(t []byte) (int64, bool) {
	y, m, d, clock, ok := splitTimestamp(t)
	if !ok {
		return 0, false
	}
	return connectjson.DaysFromCivil(y, m, d)*86_400_000_000 + clock, true
}

// splitTimestamp reads fastTimestamp's rendering into the date and the microseconds past
// midnight.
func splitTimestamp(t []byte) (y, m, d, clock int64, ok bool) {
	if len(t) < 19 {
		return 0, 0, 0, 0, false
	}
	t19 := t[:19:19] // one bounds check for the fixed part
	if t19[4] != '-' || t19[7] != '-' || t19[10] != ' ' || t19[13] != ':' || t19[16] != ':' {
		return 0, 0, 0, 0, false
	}
	y1, y2 := d2(t19[0], t19[1]), d2(t19[2], t19[3])
	y, m, d = y1*100+y2, d2(t19[5], t19[6]), d2(t19[8], t19[9])
	h, mi, sec := d2(t19[11], t19[12]), d2(t19[14], t19[15]), d2(t19[17], t19[18])
	if y1 < 0 || y2 < 0 || y < 1 || m < 1 || m > 12 || d < 1 || d > 31 || h < 0 || h > 24 || mi < 0 || mi > 59 || sec < 0 || sec > 60 {
		return 0, 0, 0, 0, false
	}
	var frac int64
	if len(t) > 19 {
		f := t[20:]
		if t[19] != '.' || len(f) == 0 || len(f) > 6 {
			return 0, 0, 0, 0, false
		}
		for _, c := range f {
			if c-'0' > 9 {
				return 0, 0, 0, 0, false
			}
			frac = frac*10 + int64(c-'0')
		}
		for i := len(f); i < 6; i++ {
			frac *= 10
		}
	}
	return y, m, d, ((h*60+mi)*60+sec)*1_000_000 + frac, true
}

// d2 parses two decimal digits; -1 when either is not one.
func d2(a, b byte) int64 {
	if a-'0' > 9 || b-'0' > 9 {
		return -1
	}
	return int64(a-'0')*10 + int64(b-'0')
}

// fastZoned writes io.debezium.time.ZonedTimestamp of a timestamptz rendered in UTC, the
// session time zone of cdc's connections ("2024-01-31 12:34:56.5+00" becomes
// "2024-01-31T12:34:56.5Z": PostgreSQL writes no trailing zeros in the fraction either); ok is
// false for every other text.
func fastZoned(t, dst []byte) ([]byte, bool) {
	n := len(t)
	if n < 22 || t[n-3] != '+' || t[n-2] != '0' || t[n-1] != '0' || n > 22 && t[n-4] == '0' {
		return dst, false // not UTC, or a fraction with trailing zeros (ISO writes none)
	}
	if _, _, _, _, ok := splitTimestamp(t[:n-3]); !ok {
		return dst, false
	}
	dst = append(dst, t[:10]...)
	dst = append(dst, 'T')
	dst = append(dst, t[11:n-3]...)
	return append(dst, 'Z'), true
}

// parseInt parses -?[0-9]+ into an int64.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// appendDecimal appends the unscaled value of text at scale as Avro's decimal: bytes of its
// two's complement, big-endian, in as few bytes as Java's BigInteger.toByteArray uses. A value of
// more digits than precision is refused: the schema's readers could not hold it.
func (c *converter) appendDecimal(dst []byte, precision, scale int32, text []byte) ([]byte, error) {
	if v, ok := fastDecimal(text, int(scale)); ok {
		if precision < 19 && (v >= pow10[precision] || v <= -pow10[precision]) {
			return dst, fmt.Errorf("%s has more digits than precision %d", text, precision)
		}
		return appendUnscaledInt(dst, v), nil
	}
	neg, intPart, frac, err := connectjson.ParseNumeric(text)
	if err != nil {
		return dst, err
	}
	c.num = append(append(c.num[:0], intPart...), frac...)
	s := int(scale)
	if s >= len(frac) {
		for i := len(frac); i < s; i++ {
			c.num = append(c.num, '0')
		}
	} else {
		drop := len(frac) - s
		for _, d := range c.num[len(c.num)-drop:] {
			if d != '0' {
				return dst, fmt.Errorf("%s has more digits than scale %d", text, s)
			}
		}
		c.num = c.num[:len(c.num)-drop]
	}
	digits := bytes.TrimLeft(c.num, "0")
	if len(digits) > int(precision) {
		return dst, fmt.Errorf("%s has more digits than precision %d", text, precision)
	}
	return appendUnscaled(dst, neg, c.num)
}

// pow10[i] is 10^i.
var pow10 = func() (p [19]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// appendMoney appends money_out's "$1,234.56" (lc_monetary C or English) as a decimal of scale 2.
func (c *converter) appendMoney(dst []byte, text []byte) ([]byte, error) {
	c.num = c.num[:0]
	neg, fracAt := false, -1
	for _, ch := range text {
		switch {
		case ch >= '0' && ch <= '9':
			c.num = append(c.num, ch)
		case ch == '-' || ch == '(':
			neg = true
		case ch == '.':
			fracAt = len(c.num)
		}
	}
	if len(c.num) == 0 || fracAt < 0 || len(c.num)-fracAt != 2 {
		return dst, fmt.Errorf("%q is not money with 2 fraction digits (set lc_monetary to C or an English locale)", text)
	}
	return appendUnscaled(dst, neg, c.num)
}

// fastDecimal reads numeric_out's "-1234.5" at scale as an unscaled int64 when it has at most 18
// digits and no more fraction digits than the scale; ok is false otherwise.
func fastDecimal(text []byte, scale int) (int64, bool) {
	t := text
	neg := len(t) > 0 && t[0] == '-'
	if neg {
		t = t[1:]
	}
	var v int64
	digits, frac := 0, -1
	for _, c := range t {
		switch {
		case c-'0' <= 9:
			v = v*10 + int64(c-'0')
			digits++
			if frac >= 0 {
				frac++
			}
		case c == '.' && frac < 0:
			frac = 0
		default:
			return 0, false
		}
	}
	if digits == 0 || frac == 0 || frac > scale {
		return 0, false
	}
	for frac = max(frac, 0); frac < scale; frac++ {
		v *= 10
		digits++
	}
	if digits > 18 {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// appendUnscaledInt appends v as Avro bytes of its minimal two's complement, big-endian.
func appendUnscaledInt(dst []byte, v int64) []byte {
	u := uint64(v)
	if v < 0 {
		u = ^u
	}
	n := bits.Len64(u)/8 + 1
	dst = appendLong(dst, int64(n))
	for i := n - 1; i >= 0; i-- {
		dst = append(dst, byte(uint64(v)>>(8*i)))
	}
	return dst
}

// appendUnscaled appends digits, with sign, as Avro bytes of the minimal two's complement.
func appendUnscaled(dst []byte, neg bool, digits []byte) ([]byte, error) {
	for len(digits) > 1 && digits[0] == '0' {
		digits = digits[1:]
	}
	if len(digits) <= 18 {
		var v int64
		for _, d := range digits {
			v = v*10 + int64(d-'0')
		}
		if neg {
			v = -v
		}
		u := uint64(v)
		if v < 0 {
			u = ^u
		}
		n := bits.Len64(u)/8 + 1
		var b [9]byte
		binary.BigEndian.PutUint64(b[1:], uint64(v))
		if v < 0 {
			b[0] = 0xff
		}
		return appendBytes(dst, b[9-n:]), nil
	}
	x, ok := new(big.Int).SetString(string(digits), 10)
	if !ok {
		return dst, fmt.Errorf("%q is not a number", digits)
	}
	var out []byte
	if neg {
		m := new(big.Int).Sub(x, big.NewInt(1))
		n := m.BitLen()/8 + 1
		mod := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
		out = mod.Sub(mod, x).FillBytes(make([]byte, n))
	} else {
		out = x.FillBytes(make([]byte, x.BitLen()/8+1))
	}
	return appendBytes(dst, out), nil
}

// appendBytea appends bytea's text output (hex "\x0a1b", or the escape format) as Avro bytes.
func appendBytea(dst []byte, text []byte) ([]byte, error) {
	orig := len(dst)
	if len(text) >= 2 && text[0] == '\\' && text[1] == 'x' {
		h := text[2:]
		if len(h)%2 != 0 {
			return dst, fmt.Errorf("odd number of hex digits")
		}
		dst = appendLong(dst, int64(len(h)/2))
		for i := 0; i < len(h); i += 2 {
			hi, ok1 := unhex(h[i])
			lo, ok2 := unhex(h[i+1])
			if !ok1 || !ok2 {
				return dst[:orig], fmt.Errorf("invalid hex digit")
			}
			dst = append(dst, hi<<4|lo)
		}
		return dst, nil
	}
	// Escape format: count first, then write.
	n := 0
	for i := 0; i < len(text); i++ {
		if text[i] == '\\' {
			switch {
			case i+1 < len(text) && text[i+1] == '\\':
				i++
			case i+3 < len(text):
				i += 3
			default:
				return dst, fmt.Errorf("invalid escape")
			}
		}
		n++
	}
	dst = appendLong(dst, int64(n))
	for i := 0; i < len(text); i++ {
		ch := text[i]
		if ch == '\\' {
			if text[i+1] == '\\' {
				i++
			} else {
				o1, o2, o3 := text[i+1], text[i+2], text[i+3]
				if !isOctal(o1) || !isOctal(o2) || !isOctal(o3) || o1 > '3' {
					return dst[:orig], fmt.Errorf("invalid escape")
				}
				ch = (o1-'0')<<6 | (o2-'0')<<3 | (o3 - '0')
				i += 3
			}
		}
		dst = append(dst, ch)
	}
	return dst, nil
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

// appendBits appends io.debezium.data.Bits: the last bit is bit 0, bytes little-endian, as many
// bytes as the highest set bit needs.
func appendBits(dst []byte, text []byte) ([]byte, error) {
	high := -1 // the highest set bit
	for i, ch := range text {
		switch {
		case ch == '1' && high < 0:
			high = len(text) - 1 - i
		case ch == '0' || ch == '1':
		default:
			return dst, fmt.Errorf("%q is not a bit string", text)
		}
	}
	n := (high + 8) / 8
	dst = appendLong(dst, int64(n))
	start := len(dst)
	for range n {
		dst = append(dst, 0)
	}
	for i := len(text) - 1; i >= 0; i-- {
		if text[i] == '1' {
			bit := len(text) - 1 - i
			dst[start+bit/8] |= 1 << (bit % 8)
		}
	}
	return dst, nil
}

// elem is one element of an array literal: its text in converter.text, or NULL.
type elem struct {
	from, to int
	null     bool
}

// maxDims is PostgreSQL's MAXDIM.
const maxDims = 6

// appendArray appends an array literal ("{1,2,NULL}", `{"a b","q\"x"}`, "[0:1]={{1,2},{3,4}}")
// as one Avro array of optional elements in row-major order, whatever its dimensions: a column's
// dimensions are not part of its type in PostgreSQL, so its schema cannot nest. When the value
// has several dimensions or a lower bound other than 1, c.shape receives PostgreSQL's
// decoration of it ("[0:2]", "[1:2][1:3]") for the HeaderArrayDims header.
func (c *converter) appendArray(dst []byte, n *node, text []byte) ([]byte, error) {
	c.elems, c.text, c.shape = c.elems[:0], c.text[:0], c.shape[:0]
	i := skipSpace(text, 0)
	var deco []byte
	if i < len(text) && text[i] == '[' {
		eq := bytes.IndexByte(text, '=')
		if eq < 0 {
			return dst, fmt.Errorf("malformed array literal: dimension decoration without '='")
		}
		deco, i = text[i:eq], eq+1
	}
	var dims [maxDims]int
	ndims := 0
	i, err := c.arrayLevel(text, i, 0, &dims, &ndims)
	if err != nil {
		return dst, err
	}
	if skipSpace(text, i) != len(text) {
		return dst, fmt.Errorf("malformed array literal: junk after '}'")
	}
	switch {
	case deco != nil:
		c.shape = append(c.shape, deco...)
	case ndims > 1:
		for d := range ndims {
			c.shape = append(c.shape, "[1:"...)
			c.shape = strconv.AppendInt(c.shape, int64(dims[d]), 10)
			c.shape = append(c.shape, ']')
		}
	}
	if len(c.elems) > 0 {
		dst = appendLong(dst, int64(len(c.elems)))
		for _, e := range c.elems {
			if e.null {
				dst = append(dst, unionNull)
				continue
			}
			dst = append(dst, unionValue)
			if dst, err = c.convert(dst, n.elem, c.text[e.from:e.to]); err != nil {
				return dst, err
			}
		}
	}
	return append(dst, 0), nil
}

// arrayLevel reads the level of braces at text[i:] (depth 0 the outermost), appending its
// elements to c.elems; it returns the index after its closing brace.
func (c *converter) arrayLevel(text []byte, i, depth int, dims *[maxDims]int, ndims *int) (int, error) {
	if depth >= maxDims {
		return i, fmt.Errorf("malformed array literal: more than %d dimensions", maxDims)
	}
	i = skipSpace(text, i)
	if i >= len(text) || text[i] != '{' {
		return i, fmt.Errorf("malformed array literal: want '{'")
	}
	*ndims = max(*ndims, depth+1)
	i = skipSpace(text, i+1)
	count := 0
	if i < len(text) && text[i] == '}' {
		return i + 1, nil
	}
	for {
		i = skipSpace(text, i)
		if i >= len(text) {
			return i, fmt.Errorf("malformed array literal: unterminated")
		}
		switch text[i] {
		case '{':
			var err error
			if i, err = c.arrayLevel(text, i, depth+1, dims, ndims); err != nil {
				return i, err
			}
		case '"':
			e := elem{from: len(c.text)}
			i++
			for i < len(text) && text[i] != '"' {
				if text[i] == '\\' && i+1 < len(text) {
					i++
				}
				c.text = append(c.text, text[i])
				i++
			}
			if i >= len(text) {
				return i, fmt.Errorf("malformed array literal: unterminated quoted element")
			}
			i++
			e.to = len(c.text)
			c.elems = append(c.elems, e)
		default:
			e := elem{from: len(c.text)}
			for i < len(text) && text[i] != ',' && text[i] != '}' {
				if text[i] == '\\' && i+1 < len(text) {
					i++
				}
				c.text = append(c.text, text[i])
				i++
			}
			for len(c.text) > e.from && pgjson.IsArraySpace(c.text[len(c.text)-1]) {
				c.text = c.text[:len(c.text)-1]
			}
			e.to = len(c.text)
			e.null = e.to-e.from == 4 && bytes.EqualFold(c.text[e.from:], []byte("NULL"))
			c.elems = append(c.elems, e)
		}
		count++
		i = skipSpace(text, i)
		if i < len(text) && text[i] == ',' {
			i++
			continue
		}
		if i < len(text) && text[i] == '}' {
			if dims[depth] == 0 {
				dims[depth] = count
			}
			return i + 1, nil
		}
		return i, fmt.Errorf("malformed array literal: want ',' or '}'")
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && pgjson.IsArraySpace(b[i]) {
		i++
	}
	return i
}
