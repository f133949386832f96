package pgjson

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"

	"github.com/tidemark/cdc/pkg/format"
)

// parseNumeric splits numeric_out's rendering ("-12.50", "7") into sign, integer and fraction
// digits.
func parseNumeric(text []byte) (neg bool, intPart, frac []byte, err error) {
	t := text
	if len(t) > 0 && (t[0] == '-' || t[0] == '+') {
		neg = t[0] == '-'
		t = t[1:]
	}
	dot := -1
	for i, ch := range t {
		if ch == '.' && dot < 0 {
			dot = i
			continue
		}
		if ch < '0' || ch > '9' {
			switch string(text) {
			case "NaN", "Infinity", "-Infinity":
				return false, nil, nil, fmt.Errorf("%s: %w (Kafka Connect's Decimal has no NaN or infinity)", text, format.ErrNotRepresentable)
			}
			return false, nil, nil, fmt.Errorf("%q is not a number", text)
		}
	}
	intPart, frac = t, nil
	if dot >= 0 {
		intPart, frac = t[:dot], t[dot+1:]
	}
	if len(intPart)+len(frac) == 0 {
		return false, nil, nil, fmt.Errorf("%q is not a number", text)
	}
	return neg, intPart, frac, nil
}

// appendDecimal appends a Connect Decimal at n.scale: the unscaled value in two's complement,
// big-endian, in as few bytes as Java's BigInteger.toByteArray uses, base64-encoded.
func (c *Converter) appendDecimal(dst []byte, n *Node, text []byte) ([]byte, error) {
	if n.conv == cvMoney {
		// money_out under lc_monetary=C or an English locale: "$1,234.56", "-$1,234.56".
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
		if len(c.num) == 0 || fracAt < 0 || len(c.num)-fracAt != int(n.scale) {
			return dst, fmt.Errorf("%q is not money with %d fraction digits (set lc_monetary to C or an English locale)", text, n.scale)
		}
		return appendUnscaled(dst, neg, c.num)
	}
	neg, intPart, frac, err := parseNumeric(text)
	if err != nil {
		return dst, err
	}
	c.num = append(c.num[:0], intPart...)
	s := int(n.scale)
	switch {
	case s >= len(frac):
		c.num = append(c.num, frac...)
		for i := len(frac); i < s; i++ {
			c.num = append(c.num, '0')
		}
	default: // more fraction digits than the scale, or a negative scale
		c.num = append(c.num, frac...)
		drop := len(frac) - s
		if drop > len(c.num) {
			drop = len(c.num)
		}
		for _, d := range c.num[len(c.num)-drop:] {
			if d != '0' {
				return dst, fmt.Errorf("%s has more digits than scale %d", text, s)
			}
		}
		c.num = c.num[:len(c.num)-drop]
	}
	return appendUnscaled(dst, neg, c.num)
}

// appendVarDecimal appends Debezium's VariableScaleDecimal: {"scale":<fraction digits>,
// "value":<unscaled bytes>}.
func (c *Converter) appendVarDecimal(dst []byte, text []byte) ([]byte, error) {
	neg, intPart, frac, err := parseNumeric(text)
	if err != nil {
		return dst, err
	}
	c.num = append(append(c.num[:0], intPart...), frac...)
	dst = append(dst, `{"scale":`...)
	dst = strconv.AppendInt(dst, int64(len(frac)), 10)
	dst = append(dst, `,"value":`...)
	dst, err = appendUnscaled(dst, neg, c.num)
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// appendUnscaled appends the digits (with sign) as a base64 JSON string of the minimal two's
// complement big-endian bytes.
func appendUnscaled(dst []byte, neg bool, digits []byte) ([]byte, error) {
	for len(digits) > 1 && digits[0] == '0' {
		digits = digits[1:]
	}
	var b [9]byte
	if len(digits) <= 18 {
		var v int64
		for _, d := range digits {
			v = v*10 + int64(d-'0')
		}
		if neg {
			v = -v
		}
		// Java's BigInteger.toByteArray: bitLength (excluding sign) + 1 sign bit, rounded up.
		u := uint64(v)
		if v < 0 {
			u = ^u
		}
		n := bits.Len64(u)/8 + 1
		binary.BigEndian.PutUint64(b[1:], uint64(v))
		if v < 0 {
			b[0] = 0xff
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b[9-n:])
		return append(dst, '"'), nil
	}
	x, ok := new(big.Int).SetString(string(digits), 10)
	if !ok {
		return dst, fmt.Errorf("%q is not a number", digits)
	}
	var out []byte
	if neg {
		// two's complement of -x in n bytes: 2^(8n) - x
		m := new(big.Int).Sub(x, big.NewInt(1)) // bitLength(-x) = bitLength(x-1)
		n := m.BitLen()/8 + 1
		mod := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
		out = mod.Sub(mod, x).FillBytes(make([]byte, n))
	} else {
		n := x.BitLen()/8 + 1
		out = x.FillBytes(make([]byte, n))
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, out)
	return append(dst, '"'), nil
}

// appendBits appends io.debezium.data.Bits as Debezium writes a bit string: the last bit is bit 0,
// bytes little-endian, as many bytes as the highest set bit needs (none for all zeros).
func appendBits(dst []byte, text []byte) ([]byte, error) {
	var buf [64]byte
	out := buf[:0]
	high := -1
	for i := len(text) - 1; i >= 0; i-- {
		bit := len(text) - 1 - i
		switch text[i] {
		case '1':
			for len(out) <= bit/8 {
				out = append(out, 0)
			}
			out[bit/8] |= 1 << (bit % 8)
			high = bit
		case '0':
		default:
			return dst, fmt.Errorf("%q is not a bit string", text)
		}
	}
	out = out[:(high+8)/8]
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, out)
	return append(dst, '"'), nil
}

// appendGeometric converts point, line, circle, box, lseg, path and polygon as Debezium does:
// Point {x,y,wkb,srid}, Line {a,b,c}, Circle {center,radius} and, for the others, Geometry
// {wkb,srid,extensions} with OGC Well-Known Binary (little-endian).
func (c *Converter) appendGeometric(dst []byte, cv conv, text []byte) ([]byte, error) {
	c.floats = c.floats[:0]
	for i := 0; i < len(text); {
		ch := text[i]
		if ch == '(' || ch == ')' || ch == '[' || ch == ']' || ch == '{' || ch == '}' || ch == '<' || ch == '>' || ch == ',' || ch == ' ' {
			i++
			continue
		}
		j := i
		for j < len(text) && text[j] != ',' && text[j] != ')' && text[j] != ']' && text[j] != '}' && text[j] != '>' && text[j] != ' ' {
			j++
		}
		tok := text[i:j]
		if !isJSONNumber(tok) {
			return dst, fmt.Errorf("%s: coordinate %q: %w (JSON has no NaN or infinity)", text, tok, format.ErrNotRepresentable)
		}
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil || math.IsInf(f, 0) {
			return dst, fmt.Errorf("%s: coordinate %q: %w", text, tok, format.ErrNotRepresentable)
		}
		c.floats = append(c.floats, f)
		i = j
	}
	f := c.floats
	want := map[conv]int{cvPoint: 2, cvLine: 3, cvCircle: 3, cvBox: 4, cvLseg: 4}[cv]
	if (want > 0 && len(f) != want) || len(f)%2 != 0 && cv != cvLine && cv != cvCircle || len(f) == 0 {
		return dst, fmt.Errorf("%q: unexpected number of coordinates", text)
	}
	num := func(dst []byte, v float64) []byte { return strconv.AppendFloat(dst, v, 'g', -1, 64) }
	switch cv {
	case cvPoint:
		return c.appendPoint(dst, f[0], f[1]), nil
	case cvLine:
		dst = append(dst, `{"a":`...)
		dst = num(dst, f[0])
		dst = append(dst, `,"b":`...)
		dst = num(dst, f[1])
		dst = append(dst, `,"c":`...)
		dst = num(dst, f[2])
		return append(dst, '}'), nil
	case cvCircle:
		dst = append(dst, `{"center":`...)
		dst = c.appendPoint(dst, f[0], f[1])
		dst = append(dst, `,"radius":`...)
		dst = num(dst, f[2])
		return append(dst, '}'), nil
	}
	w := c.wkb[:0]
	ext := `{"type":"polygon"}`
	switch cv {
	case cvBox:
		x1, y1, x2, y2 := f[0], f[1], f[2], f[3]
		w = wkbHeader(w, 3)
		w = binary.LittleEndian.AppendUint32(w, 1)
		w = wkbPoints(w, x1, y1, x1, y2, x2, y2, x2, y1, x1, y1)
		ext = `{"type":"box"}`
	case cvLseg:
		w = wkbHeader(w, 2)
		w = wkbPoints(w, f...)
		ext = `{"type":"lseg"}`
	case cvPath:
		w = wkbHeader(w, 2)
		w = wkbPoints(w, f...)
		ext = `{"type":"path","closed":"true"}`
		if text[0] == '[' {
			ext = `{"type":"path","closed":"false"}`
		}
	case cvPolygon:
		w = wkbHeader(w, 3)
		w = binary.LittleEndian.AppendUint32(w, 1)
		closed := f[0] == f[len(f)-2] && f[1] == f[len(f)-1]
		if closed {
			w = wkbPoints(w, f...)
		} else {
			n := len(f) / 2
			w = binary.LittleEndian.AppendUint32(w, uint32(n+1))
			for _, v := range f {
				w = binary.LittleEndian.AppendUint64(w, math.Float64bits(v))
			}
			w = binary.LittleEndian.AppendUint64(w, math.Float64bits(f[0]))
			w = binary.LittleEndian.AppendUint64(w, math.Float64bits(f[1]))
		}
	}
	c.wkb = w
	dst = append(dst, `{"wkb":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, w)
	dst = append(dst, `","srid":null,"extensions":`...)
	dst = append(dst, ext...)
	return append(dst, '}'), nil
}

func (c *Converter) appendPoint(dst []byte, x, y float64) []byte {
	var w [21]byte
	w[0] = 1
	binary.LittleEndian.PutUint32(w[1:], 1)
	binary.LittleEndian.PutUint64(w[5:], math.Float64bits(x))
	binary.LittleEndian.PutUint64(w[13:], math.Float64bits(y))
	dst = append(dst, `{"x":`...)
	dst = strconv.AppendFloat(dst, x, 'g', -1, 64)
	dst = append(dst, `,"y":`...)
	dst = strconv.AppendFloat(dst, y, 'g', -1, 64)
	dst = append(dst, `,"wkb":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, w[:])
	return append(dst, `","srid":null}`...)
}

func wkbHeader(w []byte, typ uint32) []byte {
	w = append(w, 1) // little-endian
	return binary.LittleEndian.AppendUint32(w, typ)
}

// wkbPoints appends a point count and the coordinates (pairs).
func wkbPoints(w []byte, xy ...float64) []byte {
	w = binary.LittleEndian.AppendUint32(w, uint32(len(xy)/2))
	for _, v := range xy {
		w = binary.LittleEndian.AppendUint64(w, math.Float64bits(v))
	}
	return w
}

// appendFlatArray appends an array literal as one flat Connect array (row-major order, whatever
// its dimensions). For a top-level column value whose shape is not one dimension starting at 1,
// c.shape receives PostgreSQL's dimension decoration ("[0:2]", "[1:2][1:3]"); below the top level
// such a shape cannot be reported and is refused.
func (c *Converter) appendFlatArray(dst []byte, n *Node, text []byte, top bool) ([]byte, error) {
	if !top {
		text = append([]byte(nil), text...) // an element of an outer value may live in c.scratch
	}
	p := arrayParser{text: text, scratch: &c.scratch, conn: c, node: n.elem, flat: true}
	deco, err := p.skipDecoration()
	if err != nil {
		return dst, err
	}
	dst = append(dst, '[')
	out, err := p.level(dst, 1)
	if err == nil {
		err = p.end()
	}
	if err != nil {
		return dst, err
	}
	if deco == nil && p.ndims > 1 {
		for d := 0; d < p.ndims; d++ {
			deco = append(deco, "[1:"...)
			deco = strconv.AppendInt(deco, int64(p.dims[d]), 10)
			deco = append(deco, ']')
		}
	}
	if deco != nil {
		if !top {
			return dst, fmt.Errorf("array %s inside another value: %w (only a column's own array may have several dimensions or a lower bound other than 1)", deco, format.ErrNotRepresentable)
		}
		c.shape = append(c.shape[:0], deco...)
	}
	return append(out, ']'), nil
}

// appendComposite appends a composite value, record_out's "(1,"a b",,"x""y")", as a struct. An
// empty unquoted field is NULL.
func (c *Converter) appendComposite(dst []byte, n *Node, text []byte) ([]byte, error) {
	if len(text) < 2 || text[0] != '(' || text[len(text)-1] != ')' {
		return dst, fmt.Errorf("%q is not a composite value", text)
	}
	// A copy: fields that are arrays reuse c.scratch, where text may live.
	body := append([]byte(nil), text[1:len(text)-1]...)
	dst = append(dst, '{')
	pos := 0
	var field []byte // own buffer: fields may nest composites and arrays that use c's buffers
	for i, m := range n.members {
		if i > 0 {
			if pos >= len(body) || body[pos] != ',' {
				return dst, fmt.Errorf("%q has fewer fields than the type (if the type changed since cdc read it, restart cdc)", text)
			}
			pos++
			dst = append(dst, ',')
		}
		dst = append(dst, m.name...)
		var val []byte
		quoted := false
		field = field[:0]
		for pos < len(body) && body[pos] != ',' {
			ch := body[pos]
			switch {
			case ch == '"':
				quoted = true
				pos++
				for pos < len(body) {
					if body[pos] == '"' {
						if pos+1 < len(body) && body[pos+1] == '"' {
							field = append(field, '"')
							pos += 2
							continue
						}
						break
					}
					if body[pos] == '\\' && pos+1 < len(body) {
						pos++
					}
					field = append(field, body[pos])
					pos++
				}
				if pos >= len(body) {
					return dst, fmt.Errorf("%q: unterminated quoted field", text)
				}
				pos++
			case ch == '\\' && pos+1 < len(body):
				field = append(field, body[pos+1])
				pos += 2
			default:
				field = append(field, ch)
				pos++
			}
		}
		if quoted || len(field) > 0 {
			val = append([]byte{}, field...)
		}
		var err error
		if dst, err = c.AppendConnect(dst, m.n, val, false); err != nil {
			return dst, fmt.Errorf("field %s: %w", m.name[:len(m.name)-1], err)
		}
	}
	if pos != len(body) {
		return dst, fmt.Errorf("%q has more fields than the type (if the type changed since cdc read it, restart cdc)", text)
	}
	return append(dst, '}'), nil
}

// appendHstore appends an hstore value ("a"=>"1", "b"=>NULL) as Debezium's JSON mode does: a
// JSON string holding the object {"a":"1","b":null}, in hstore's own key order.
func (c *Converter) appendHstore(dst []byte, text []byte) ([]byte, error) {
	obj := append(c.wkb[:0], '{')
	quoted := func(i int) ([]byte, int, bool) {
		if i >= len(text) || text[i] != '"' {
			return nil, i, false
		}
		start := len(c.num)
		c.num = append(c.num, 0)[:start]
		for i++; i < len(text) && text[i] != '"'; i++ {
			if text[i] == '\\' && i+1 < len(text) {
				i++
			}
			c.num = append(c.num, text[i])
		}
		if i >= len(text) {
			return nil, i, false
		}
		return c.num[start:], i + 1, true
	}
	skip := func(i int) int {
		for i < len(text) && (text[i] == ' ' || text[i] == ',') {
			i++
		}
		return i
	}
	c.num = c.num[:0]
	first := true
	for i := skip(0); i < len(text); i = skip(i) {
		key, j, ok := quoted(i)
		if !ok || j+2 > len(text) || text[j] != '=' || text[j+1] != '>' {
			return dst, fmt.Errorf("%q is not an hstore value", text)
		}
		if !first {
			obj = append(obj, ',')
		}
		first = false
		obj = AppendString(obj, key)
		obj = append(obj, ':')
		j += 2
		if j+4 <= len(text) && string(text[j:j+4]) == "NULL" {
			obj = append(obj, "null"...)
			i = j + 4
			continue
		}
		val, k, ok := quoted(j)
		if !ok {
			return dst, fmt.Errorf("%q is not an hstore value", text)
		}
		obj = AppendString(obj, val)
		i = k
	}
	obj = append(obj, '}')
	c.wkb = obj
	return AppendString(dst, obj), nil
}
