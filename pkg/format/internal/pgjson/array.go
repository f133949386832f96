package pgjson

import (
	"bytes"
	"errors"
	"fmt"
)

// maxArrayDepth is PostgreSQL's MAXDIM: no array literal it renders nests deeper.
const maxArrayDepth = 6

// errArraySyntax is wrapped by every array literal parse error.
var errArraySyntax = errors.New("malformed array literal")

// arrayParser walks one PostgreSQL array literal (array_out's rendering).
type arrayParser struct {
	text    []byte
	pos     int
	elem    uint32
	kind    Kind
	scratch *[]byte

	// json-with-schema: elements convert as node through conn, and with flat set every level
	// goes into one array (row-major); ndims and dims record the shape.
	conn  *Converter
	node  *Node
	flat  bool
	n     int // elements written (flat)
	ndims int
	dims  [maxArrayDepth]int
}

// appendArray appends the JSON array for text, an array literal such as `{1,2,NULL}`,
// `{{"a b","q\"x"},{c,d}}` or `[0:1]={1,2}`, whose elements have type elem. The dimension
// decoration (lower bounds other than 1) is dropped: JSON arrays start at index 0 whatever the
// PostgreSQL bounds were.
func appendArray(dst []byte, elem uint32, text []byte, scratch *[]byte) ([]byte, error) {
	p := arrayParser{text: text, elem: elem, kind: KindOf(elem), scratch: scratch}
	if _, err := p.skipDecoration(); err != nil {
		return dst, fmt.Errorf("encode array: %w", err)
	}
	out, err := p.level(dst, 1)
	if err == nil {
		err = p.end()
	}
	if err != nil {
		return dst, fmt.Errorf("encode array: %w", err)
	}
	return out, nil
}

// skipDecoration moves p past the dimension decoration that starts a literal whose bounds are
// not all 1 ("[0:1]=" of "[0:1]={1,2}") and returns it without the '=' (nil when there is none).
func (p *arrayParser) skipDecoration() ([]byte, error) {
	if len(p.text) == 0 || p.text[0] != '[' {
		return nil, nil
	}
	eq := bytes.IndexByte(p.text, '=')
	if eq < 0 {
		return nil, fmt.Errorf("%w: dimension decoration without '='", errArraySyntax)
	}
	p.pos = eq + 1
	return p.text[:eq], nil
}

// end checks that nothing but spaces follows the outermost level.
func (p *arrayParser) end() error {
	p.skipSpace()
	if p.pos != len(p.text) {
		return fmt.Errorf("%w: junk after closing brace at byte %d", errArraySyntax, p.pos)
	}
	return nil
}

func (p *arrayParser) skipSpace() {
	for p.pos < len(p.text) && IsArraySpace(p.text[p.pos]) {
		p.pos++
	}
}

func IsArraySpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// level parses one brace-enclosed level starting at p.pos (after optional spaces).
func (p *arrayParser) level(dst []byte, depth int) ([]byte, error) {
	if depth > maxArrayDepth {
		return dst, fmt.Errorf("%w: more than %d dimensions", errArraySyntax, maxArrayDepth)
	}
	p.skipSpace()
	if p.pos >= len(p.text) || p.text[p.pos] != '{' {
		return dst, fmt.Errorf("%w: want '{' at byte %d", errArraySyntax, p.pos)
	}
	p.pos++
	if !p.flat {
		dst = append(dst, '[')
	}
	if depth > p.ndims {
		p.ndims = depth
	}
	p.skipSpace()
	if p.pos < len(p.text) && p.text[p.pos] == '}' {
		p.pos++
		if p.flat {
			return dst, nil
		}
		return append(dst, ']'), nil
	}
	count := 0
	for first := true; ; first = false {
		if !first && !p.flat {
			dst = append(dst, ',')
		}
		p.skipSpace()
		var err error
		if p.pos < len(p.text) && p.text[p.pos] == '{' {
			dst, err = p.level(dst, depth+1)
		} else {
			if p.flat {
				if p.n > 0 {
					dst = append(dst, ',')
				}
				p.n++
			}
			dst, err = p.element(dst)
		}
		if err != nil {
			return dst, err
		}
		count++
		p.skipSpace()
		if p.pos >= len(p.text) {
			return dst, fmt.Errorf("%w: unexpected end", errArraySyntax)
		}
		switch p.text[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			if p.dims[depth-1] == 0 {
				p.dims[depth-1] = count
			}
			if p.flat {
				return dst, nil
			}
			return append(dst, ']'), nil
		default:
			return dst, fmt.Errorf("%w: unexpected %q at byte %d", errArraySyntax, p.text[p.pos], p.pos)
		}
	}
}

// element parses one quoted or unquoted element and appends its JSON value.
func (p *arrayParser) element(dst []byte) ([]byte, error) {
	var val []byte
	if p.pos < len(p.text) && p.text[p.pos] == '"' {
		p.pos++
		start := p.pos
		escaped := false
		for ; p.pos < len(p.text) && p.text[p.pos] != '"'; p.pos++ {
			if p.text[p.pos] == '\\' {
				escaped = true
				p.pos++
			}
		}
		if p.pos >= len(p.text) {
			return dst, fmt.Errorf("%w: unterminated quoted element", errArraySyntax)
		}
		val = p.text[start:p.pos:p.pos]
		p.pos++ // closing quote
		if escaped {
			val = p.unescape(val)
		}
	} else {
		start := p.pos
		escaped := false
		for ; p.pos < len(p.text); p.pos++ {
			c := p.text[p.pos]
			if c == '\\' {
				escaped = true
				p.pos++
				continue
			}
			if c == ',' || c == '}' || c == '{' || c == '"' {
				break
			}
		}
		if p.pos > len(p.text) {
			return dst, fmt.Errorf("%w: trailing backslash", errArraySyntax)
		}
		end := p.pos
		for end > start && IsArraySpace(p.text[end-1]) && (end-2 < start || p.text[end-2] != '\\') {
			end--
		}
		val = p.text[start:end:end]
		if len(val) == 0 {
			return dst, fmt.Errorf("%w: empty unquoted element at byte %d", errArraySyntax, start)
		}
		if escaped {
			val = p.unescape(val)
		} else if isNullWord(val) {
			return append(dst, "null"...), nil
		}
	}
	if p.node != nil {
		return p.conn.AppendConnect(dst, p.node, val, false)
	}
	return AppendKind(dst, p.kind, p.elem, val, p.scratch)
}

// unescape removes backslash escapes (a backslash quotes the next byte) into the scratch buffer.
func (p *arrayParser) unescape(s []byte) []byte {
	b := append((*p.scratch)[:0], 0)[:0] // non-nil even when empty
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b = append(b, s[i])
	}
	*p.scratch = b
	return b
}

func isNullWord(b []byte) bool {
	return len(b) == 4 && (b[0]|0x20) == 'n' && (b[1]|0x20) == 'u' && (b[2]|0x20) == 'l' && (b[3]|0x20) == 'l'
}
