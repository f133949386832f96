package codec

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrCopyTrailingBackslash is returned by SplitCopyText for a line that ends in a lone backslash,
// which COPY ... TO never writes.
var ErrCopyTrailingBackslash = errors.New("copy text: line ends with a lone backslash")

// SplitCopyText splits one line of COPY's text format (without its trailing newline) into its
// tab-separated fields and undoes COPY's backslash escapes: \b \f \n \r \t \v, \\ and any other
// escaped byte, \NNN (one to three octal digits) and \xHH (one or two hex digits; "\x" without a
// hex digit is "x", as COPY FROM reads it). A field that is exactly \N is SQL NULL and comes back
// nil; the text "\N" arrives escaped as \\N and comes back as the two bytes `\N`.
//
// The escapes are decoded in place: SplitCopyText overwrites line, and every non-nil field aliases
// line. The fields are valid until the caller reuses line. fields is truncated and reused, so
// pass the previous result back in to avoid allocating. Empty fields are non-nil.
func SplitCopyText(line []byte, fields [][]byte) ([][]byte, error) {
	fields = fields[:0]
	if line == nil {
		line = []byte{}
	}
	w := 0 // write position (decoded bytes), always <= r
	for r := 0; ; {
		// r is at the start of a field. A NULL is the raw field \N, checked before decoding.
		if len(line)-r >= 2 && line[r] == '\\' && line[r+1] == 'N' && (len(line)-r == 2 || line[r+2] == '\t') {
			fields = append(fields, nil)
			r += 2
			if r == len(line) {
				return fields, nil
			}
			r++
			continue
		}
		start := w
		end := bytes.IndexByte(line[r:], '\t')
		if end < 0 {
			end = len(line)
		} else {
			end += r
		}
		for r < end {
			bs := bytes.IndexByte(line[r:end], '\\')
			if bs < 0 {
				bs = end - r
			}
			if w != r {
				copy(line[w:], line[r:r+bs])
			}
			w += bs
			r += bs
			if r == end {
				break
			}
			r++ // the backslash
			if r == len(line) {
				return fields, fmt.Errorf("split copy line: %w", ErrCopyTrailingBackslash)
			}
			if line[r] == '\t' && end == r {
				// An escaped raw tab is data, not a separator: the field goes on.
				if next := bytes.IndexByte(line[r+1:], '\t'); next < 0 {
					end = len(line)
				} else {
					end = r + 1 + next
				}
			}
			line[w] = unescapeCopy(line, &r)
			w++
		}
		r = end
		fields = append(fields, line[start:w:w])
		if r == len(line) {
			return fields, nil
		}
		r++ // the tab
	}
}

// unescapeCopy decodes the escape whose first byte (after the backslash) is line[*r] and
// advances *r past it.
func unescapeCopy(line []byte, r *int) byte {
	c := line[*r]
	*r++
	switch c {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'v':
		return '\v'
	case '0', '1', '2', '3', '4', '5', '6', '7':
		v := c - '0'
		for n := 1; n < 3 && *r < len(line) && isOctal(line[*r]); n++ {
			v = v<<3 | (line[*r] - '0')
			*r++
		}
		return v
	case 'x':
		if *r < len(line) {
			if h, ok := unhex(line[*r]); ok {
				*r++
				if *r < len(line) {
					if l, ok := unhex(line[*r]); ok {
						h = h<<4 | l
						*r++
					}
				}
				return h
			}
		}
	}
	return c
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
