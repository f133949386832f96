package connectjson

import "github.com/tidemark/cdc/pkg/format/internal/pgjson"

// Debezium's sentinels for PostgreSQL's infinite timestamps (PGStatement.DATE_POSITIVE_INFINITY
// and DATE_NEGATIVE_INFINITY of the PostgreSQL JDBC driver), written for timestamp columns.
const (
	TimestampPosInfinity = pgjson.TimestampPosInfinity
	TimestampNegInfinity = pgjson.TimestampNegInfinity
)

// Debezium's dates for 'infinity' and '-infinity' (LocalDate -5877611-06-21 and -5877611-06-22),
// as days since the epoch.
var (
	DatePosInfinity = pgjson.DatePosInfinity
	DateNegInfinity = pgjson.DateNegInfinity
)

// DaysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian date with an
// astronomical year (1 BC is year 0).
func DaysFromCivil(y, m, d int64) int64 { return pgjson.DaysFromCivil(y, m, d) }

// CivilFromDays is the inverse of DaysFromCivil.
func CivilFromDays(z int64) (y, m, d int64) { return pgjson.CivilFromDays(z) }
