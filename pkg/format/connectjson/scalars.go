package connectjson

// Scalar conversions for formats that write numbers rather than JSON text (avro): the same
// parsing and Debezium arithmetic as the json-with-schema payloads, returning the values.

import "fmt"

// DateDays returns io.debezium.time.Date of a date's text: days since the epoch, Debezium's
// sentinels for the infinities.
func DateDays(text []byte) (int32, error) {
	switch string(text) {
	case "infinity":
		return int32(DatePosInfinity), nil
	case "-infinity":
		return int32(DateNegInfinity), nil
	}
	var buf [16]byte
	out, err := appendDate(buf[:0], text)
	if err != nil {
		return 0, err
	}
	v, ok := atoi(out)
	if !ok {
		return 0, fmt.Errorf("%q is not a date", text)
	}
	return int32(v), nil
}

// TimeMicros returns a time's microseconds past midnight (milli: milliseconds).
func TimeMicros(text []byte, milli bool) (int64, error) {
	us, rest, ok := parseClock(text)
	if !ok || len(rest) != 0 || us > microsPerDay {
		return 0, fmt.Errorf("%q is not a time", text)
	}
	if milli {
		us /= 1000
	}
	return us, nil
}

// TimestampMicros returns a timestamp's microseconds since the epoch (milli: milliseconds), the
// infinities as Debezium's sentinels.
func TimestampMicros(text []byte, milli bool) (int64, error) {
	div := int64(1)
	if milli {
		div = 1000
	}
	switch string(text) {
	case "infinity":
		return TimestampPosInfinity / div, nil
	case "-infinity":
		return TimestampNegInfinity / div, nil
	}
	us, err := parseTimestamp(text, false)
	if err != nil {
		return 0, err
	}
	return us / div, nil
}

// AppendZonedTimestamp appends io.debezium.time.ZonedTimestamp of a timestamptz's text, without
// JSON quotes: "2024-01-31T12:34:56.5Z", "infinity".
func AppendZonedTimestamp(dst, text []byte) ([]byte, error) {
	switch string(text) {
	case "infinity", "-infinity":
		return append(dst, text...), nil
	}
	n := len(dst)
	out, err := appendZonedTimestamp(dst, text)
	if err != nil {
		return dst, err
	}
	// Written as a JSON string of ASCII digits and separators: drop the quotes.
	copy(out[n:], out[n+1:len(out)-1])
	return out[:len(out)-2], nil
}

// AppendZonedTime appends io.debezium.time.ZonedTime of a timetz's text, without JSON quotes.
func AppendZonedTime(dst, text []byte) ([]byte, error) {
	n := len(dst)
	out, err := appendZonedTime(dst, text)
	if err != nil {
		return dst, err
	}
	copy(out[n:], out[n+1:len(out)-1])
	return out[:len(out)-2], nil
}

// IntervalMicros returns io.debezium.time.MicroDuration of an interval's text.
func IntervalMicros(text []byte) (int64, error) {
	var buf [24]byte
	out, err := appendMicroDuration(buf[:0], text)
	if err != nil {
		return 0, err
	}
	v, ok := atoi(out)
	if !ok {
		return 0, fmt.Errorf("%q is not an interval", text)
	}
	return v, nil
}

// ParseNumeric splits numeric_out's rendering ("-12.50", "7") into sign, integer and fraction
// digits; NaN and the infinities wrap format.ErrNotRepresentable.
func ParseNumeric(text []byte) (neg bool, intPart, frac []byte, err error) {
	return parseNumeric(text)
}

// atoi parses the decimal integer strconv.AppendInt wrote.
func atoi(b []byte) (int64, bool) {
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
		return -int64(v), true
	}
	return int64(v), true
}
