package connectjson

import (
	"bytes"
	"fmt"
	"math"
	"strconv"

	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
)

// Debezium's sentinels for PostgreSQL's infinite timestamps (PGStatement.DATE_POSITIVE_INFINITY
// and DATE_NEGATIVE_INFINITY of the PostgreSQL JDBC driver), written for timestamp columns.
const (
	TimestampPosInfinity int64 = 9223372036825200000
	TimestampNegInfinity int64 = -9223372036832400000
)

// Debezium's dates for 'infinity' and '-infinity' (LocalDate -5877611-06-21 and -5877611-06-22),
// as days since the epoch.
var (
	DatePosInfinity = DaysFromCivil(-5877611, 6, 21)
	DateNegInfinity = DaysFromCivil(-5877611, 6, 22)
)

const microsPerDay = 86_400_000_000

// DaysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian date with an
// astronomical year (1 BC is year 0).
func DaysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// CivilFromDays is the inverse of DaysFromCivil.
func CivilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// digits parses an unsigned decimal of at most 9 digits at b[i:], returning it and the new index.
func digits(b []byte, i int) (int64, int, bool) {
	s := i
	var v int64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' && i-s < 10 {
		v = v*10 + int64(b[i]-'0')
		i++
	}
	return v, i, i > s
}

// triple parses three unsigned decimals separated by sep at the start of b ("2024-05-01" with
// '-', "12:30:05" with ':'), returning them and the index after the third.
func triple(b []byte, sep byte) (x, y, z int64, i int, ok bool) {
	x, i, ok = digits(b, 0)
	if !ok || i >= len(b) || b[i] != sep {
		return 0, 0, 0, 0, false
	}
	y, i, ok = digits(b, i+1)
	if !ok || i >= len(b) || b[i] != sep {
		return 0, 0, 0, 0, false
	}
	z, i, ok = digits(b, i+1)
	return x, y, z, i, ok
}

// parseDate parses "YYYY-MM-DD" (no BC suffix) into days since the epoch; bc makes the year BC.
func parseDate(b []byte, bc bool) (days int64, rest []byte, ok bool) {
	y, m, d, i, ok := triple(b, '-')
	if !ok || m < 1 || m > 12 || d < 1 || d > 31 {
		return 0, nil, false
	}
	if bc {
		y = 1 - y
	}
	return DaysFromCivil(y, m, d), b[i:], true
}

// parseClock parses "HH:MM:SS[.ffffff]" into microseconds; it returns the rest of b.
func parseClock(b []byte) (int64, []byte, bool) {
	h, m, s, i, ok := triple(b, ':')
	if !ok {
		return 0, nil, false
	}
	us := ((h*60+m)*60 + s) * 1_000_000
	if i < len(b) && b[i] == '.' {
		i++
		scale := int64(100_000)
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if i-start < 6 {
				us += int64(b[i]-'0') * scale
				scale /= 10
			}
			i++
		}
	}
	return us, b[i:], true
}

// parseOffset parses "+HH[:MM[:SS]]" into seconds east of UTC.
func parseOffset(b []byte) (int64, []byte, bool) {
	if len(b) == 0 || (b[0] != '+' && b[0] != '-') {
		return 0, b, false
	}
	sign := int64(1)
	if b[0] == '-' {
		sign = -1
	}
	h, i, ok := digits(b, 1)
	if !ok {
		return 0, nil, false
	}
	off := h * 3600
	if i < len(b) && b[i] == ':' {
		var m int64
		if m, i, ok = digits(b, i+1); !ok {
			return 0, nil, false
		}
		off += m * 60
		if i < len(b) && b[i] == ':' {
			var s int64
			if s, i, ok = digits(b, i+1); !ok {
				return 0, nil, false
			}
			off += s
		}
	}
	return sign * off, b[i:], true
}

func cutBC(b []byte) ([]byte, bool) {
	if bytes.HasSuffix(b, []byte(" BC")) {
		return b[:len(b)-3], true
	}
	return b, false
}

// appendDate appends io.debezium.time.Date: days since the epoch.
func appendDate(dst []byte, text []byte) ([]byte, error) {
	switch string(text) {
	case "infinity":
		return strconv.AppendInt(dst, DatePosInfinity, 10), nil
	case "-infinity":
		return strconv.AppendInt(dst, DateNegInfinity, 10), nil
	}
	b, bc := cutBC(text)
	days, rest, ok := parseDate(b, bc)
	if !ok || len(rest) != 0 {
		return dst, fmt.Errorf("%q is not a date", text)
	}
	if days < math.MinInt32 || days > math.MaxInt32 {
		return dst, fmt.Errorf("date %s: %w (beyond int32 days)", text, errNotRepresentable)
	}
	return strconv.AppendInt(dst, days, 10), nil
}

// appendTime appends io.debezium.time.Time (milliseconds) or MicroTime (microseconds) past
// midnight; 24:00:00 is a day's worth.
func appendTime(dst []byte, text []byte, milli bool) ([]byte, error) {
	us, rest, ok := parseClock(text)
	if !ok || len(rest) != 0 || us > microsPerDay {
		return dst, fmt.Errorf("%q is not a time", text)
	}
	if milli {
		us /= 1000
	}
	return strconv.AppendInt(dst, us, 10), nil
}

// parseTimestamp parses "YYYY-MM-DD HH:MM:SS[.ffffff][+TZ][ BC]" into microseconds since the
// epoch (UTC when an offset is present). ok is false for bad syntax, and an error is returned
// for values outside the int64 range.
func parseTimestamp(text []byte, withTZ bool) (int64, error) {
	b, bc := cutBC(text)
	days, rest, ok := parseDate(b, bc)
	if !ok || len(rest) < 2 || rest[0] != ' ' {
		return 0, fmt.Errorf("%q is not a timestamp", text)
	}
	clock, rest, ok := parseClock(rest[1:])
	if !ok {
		return 0, fmt.Errorf("%q is not a timestamp", text)
	}
	var off int64
	if withTZ {
		if off, rest, ok = parseOffset(rest); !ok {
			return 0, fmt.Errorf("%q is not a timestamp with time zone", text)
		}
	}
	if len(rest) != 0 {
		return 0, fmt.Errorf("%q is not a timestamp", text)
	}
	const maxDays = math.MaxInt64/microsPerDay - 1
	if days > maxDays || days < -maxDays {
		return 0, fmt.Errorf("timestamp %s: %w (beyond int64 microseconds since 1970)", text, errNotRepresentable)
	}
	return days*microsPerDay + clock - off*1_000_000, nil
}

// appendEpochTimestamp appends io.debezium.time.Timestamp (ms) or MicroTimestamp (µs); infinities
// become Debezium's sentinels.
func appendEpochTimestamp(dst []byte, text []byte, milli bool) ([]byte, error) {
	// Debezium reads an infinite timestamp as the instant of the sentinel microseconds, so a
	// millisecond column gets the sentinel / 1000.
	div := int64(1)
	if milli {
		div = 1000
	}
	switch string(text) {
	case "infinity":
		return strconv.AppendInt(dst, TimestampPosInfinity/div, 10), nil
	case "-infinity":
		return strconv.AppendInt(dst, TimestampNegInfinity/div, 10), nil
	}
	us, err := parseTimestamp(text, false)
	if err != nil {
		return dst, err
	}
	if milli {
		us /= 1000
	}
	return strconv.AppendInt(dst, us, 10), nil
}

// appendISOYear appends a year as java.time's ISO formatters do: 4 digits, a '-' before negative
// years and a '+' before years past 9999.
func appendISOYear(dst []byte, y int64) []byte {
	switch {
	case y < 0:
		dst = append(dst, '-')
		y = -y
	case y > 9999:
		dst = append(dst, '+')
	}
	for p := int64(1000); p > 1 && y < p; p /= 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, y, 10)
}

func append2(dst []byte, v int64) []byte {
	return append(dst, byte('0'+v/10), byte('0'+v%10))
}

// appendClock appends HH:MM:SS and the fraction without trailing zeros (java.time's ISO_LOCAL_TIME).
func appendClock(dst []byte, us int64) []byte {
	s := us / 1_000_000
	dst = append2(dst, s/3600)
	dst = append(dst, ':')
	dst = append2(dst, s/60%60)
	dst = append(dst, ':')
	dst = append2(dst, s%60)
	if f := us % 1_000_000; f != 0 {
		dst = append(dst, '.')
		var buf [6]byte
		for i := 5; i >= 0; i-- {
			buf[i] = byte('0' + f%10)
			f /= 10
		}
		n := 6
		for n > 0 && buf[n-1] == '0' {
			n--
		}
		dst = append(dst, buf[:n]...)
	}
	return dst
}

// appendZonedTimestamp appends io.debezium.time.ZonedTimestamp: ISO-8601 in UTC
// ("2024-01-31T12:34:56.5Z"); the infinities as "infinity" and "-infinity", as Debezium does.
func appendZonedTimestamp(dst []byte, text []byte) ([]byte, error) {
	switch string(text) {
	case "infinity", "-infinity":
		return pgjson.AppendString(dst, text), nil
	}
	us, err := parseTimestamp(text, true)
	if err != nil {
		return dst, err
	}
	days := us / microsPerDay
	clock := us % microsPerDay
	if clock < 0 {
		days--
		clock += microsPerDay
	}
	y, m, d := CivilFromDays(days)
	dst = append(dst, '"')
	dst = appendISOYear(dst, y)
	dst = append(dst, '-')
	dst = append2(dst, m)
	dst = append(dst, '-')
	dst = append2(dst, d)
	dst = append(dst, 'T')
	dst = appendClock(dst, clock)
	return append(dst, `Z"`...), nil
}

// appendZonedTime appends io.debezium.time.ZonedTime: the time moved to UTC, "07:04:56.5Z".
func appendZonedTime(dst []byte, text []byte) ([]byte, error) {
	us, rest, ok := parseClock(text)
	if !ok {
		return dst, fmt.Errorf("%q is not a time with time zone", text)
	}
	off, rest, ok := parseOffset(rest)
	if !ok || len(rest) != 0 {
		return dst, fmt.Errorf("%q is not a time with time zone", text)
	}
	utc := us - off*1_000_000
	if !(utc == microsPerDay && off == 0) { // 24:00:00+00 stays the end of the day
		utc %= microsPerDay
		if utc < 0 {
			utc += microsPerDay
		}
	}
	dst = append(dst, '"')
	dst = appendClock(dst, utc)
	return append(dst, `Z"`...), nil
}

// AppendZonedTimestampText appends an io.debezium.time.ZonedTimestamp as PostgreSQL's input
// reads it. ISO-8601 writes a year before 1 astronomically ("-0043-03-15T12:00:00Z" is 44 BC,
// "0000-..." 1 BC), which PostgreSQL refuses: such a year is written as its BC year with the era
// after the value ("0044-03-15T12:00:00Z BC"). Other values are appended as they are.
func AppendZonedTimestampText(dst, s []byte) []byte {
	neg := len(s) > 0 && s[0] == '-'
	digits := s
	if neg {
		digits = s[1:]
	}
	i := 0
	for i < len(digits) && digits[i] >= '0' && digits[i] <= '9' {
		i++
	}
	if i < 4 || i >= len(digits) || digits[i] != '-' {
		return append(dst, s...) // "infinity", or not a date
	}
	year, err := strconv.ParseInt(string(digits[:i]), 10, 64)
	if err != nil || (!neg && year != 0) {
		return append(dst, s...)
	}
	if neg {
		year = -year
	}
	dst = fmt.Appendf(dst, "%04d", 1-year)
	dst = append(dst, digits[i:]...)
	return append(dst, " BC"...)
}

// appendMicroDuration appends io.debezium.time.MicroDuration with Debezium's arithmetic
// (MicroDuration.durationMicros with 365.25/12 days a month, in double precision) from
// IntervalStyle=postgres output: "1 year 2 mons -3 days +04:05:06.7".
func appendMicroDuration(dst []byte, text []byte) ([]byte, error) {
	var years, months, days, hours, minutes int64
	var seconds float64
	bad := func() ([]byte, error) { return dst, fmt.Errorf("%q is not an interval", text) }
	b := text
	for len(b) > 0 {
		for len(b) > 0 && b[0] == ' ' {
			b = b[1:]
		}
		if len(b) == 0 {
			break
		}
		neg := false
		if b[0] == '-' || b[0] == '+' {
			neg = b[0] == '-'
			b = b[1:]
		}
		n, i, ok := digits(b, 0)
		if !ok {
			return bad()
		}
		if i < len(b) && b[i] == ':' { // the time part: [+-]H:MM:SS[.ffffff]
			us, rest, ok := parseClock(b)
			if !ok || len(rest) != 0 {
				return bad()
			}
			h := us / 3_600_000_000
			mi := us / 60_000_000 % 60
			whole := us / 1_000_000 % 60
			frac := us % 1_000_000
			s := float64(whole) + float64(frac)/1e6 // pgjdbc's PGInterval.getSeconds
			if neg {
				h, mi, s = -h, -mi, -s
			}
			hours, minutes, seconds = h, mi, s
			break
		}
		if neg {
			n = -n
		}
		b = b[i:]
		if len(b) == 0 || b[0] != ' ' {
			return bad()
		}
		b = b[1:]
		j := bytes.IndexByte(b, ' ')
		if j < 0 {
			j = len(b)
		}
		switch string(b[:j]) {
		case "year", "years":
			years = n
		case "mon", "mons":
			months = n
		case "day", "days":
			days = n
		default:
			return bad()
		}
		b = b[j:]
	}
	if ym := years*12 + months; ym > math.MaxInt32 || ym < math.MinInt32 {
		return dst, fmt.Errorf("interval %s: %w (more months than Debezium's int arithmetic holds)", text, errNotRepresentable)
	}
	// MicroDuration.durationMicros: Java int arithmetic for the months, then doubles. The explicit
	// float64 conversions keep the compiler from fusing operations.
	numberOfDays := float64(float64(int32(years*12+months))*(365.25/12.0)) + float64(days)
	numberOfSeconds := float64(float64(float64(float64(float64(float64(numberOfDays*24)+float64(hours))*60)+float64(minutes))*60) + seconds)
	v := float64(numberOfSeconds * 1e6)
	if math.IsNaN(v) || v >= 9.223372036854775807e18 || v <= -9.223372036854775808e18 {
		return dst, fmt.Errorf("interval %s: %w (beyond int64 microseconds)", text, errNotRepresentable)
	}
	return strconv.AppendInt(dst, int64(v), 10), nil
}
