package format

import (
	"unicode/utf8"

	"github.com/tidemark/cdc/pkg/change"
)

// AppendJSONString appends s as a JSON string: valid UTF-8 passes through, control characters,
// quotes and backslashes are escaped, and each invalid byte becomes \ufffd. Header values and the
// JSON formats write strings with it.
func AppendJSONString(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	dst = AppendJSONEscaped(dst, s)
	return append(dst, '"')
}

// safeASCII[c] is true for ASCII bytes that need no escaping inside a JSON string.
var safeASCII = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// AppendJSONEscaped appends the body of a JSON string (no quotes). Valid UTF-8 passes through;
// each invalid byte becomes \ufffd, so the output is always valid JSON and valid UTF-8.
func AppendJSONEscaped(dst []byte, s []byte) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if safeASCII[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// AppendLSN appends l as PostgreSQL prints it: "X/Y", upper-case hex without leading zeros.
func AppendLSN(dst []byte, l change.LSN) []byte {
	dst = appendHexUpper(dst, uint32(l>>32))
	dst = append(dst, '/')
	return appendHexUpper(dst, uint32(l))
}

func appendHexUpper(dst []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	var buf [8]byte
	i := len(buf)
	for {
		i--
		buf[i] = digits[v&0xf]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(dst, buf[i:]...)
}
