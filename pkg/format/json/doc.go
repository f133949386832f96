// Package json is the plain JSON record format (CDC_VALUE_FORMAT=json, the default): its
// per-table encoder, and (decode.go) its decoder.
//
// # Records
//
//   - Key: a JSON object of the key columns in column order, e.g. {"id":1}; a truncate's key is
//     {} (no columns).
//   - Value: a Debezium-compatible envelope in compact JSON with a fixed field order:
//     {"before":{..}|null,"after":{..}|null,"source":{"version":"tidemark-1","connector":"tidemark",
//     "name":<prefix>,"db":..,"schema":..,"table":..,"lsn":<commit LSN as a number>,
//     "lsn_text":"X/Y","txId":<xid>,"sequence":<n>,"snapshot":true|false,"attempt":<n, snapshot
//     rows only>,"ts_ms":<commit time, ms>},"op":"c","ts_ms":<encoding time, ms>}.
//   - An unknown (unchanged TOAST) column is left out of after, or written as the placeholder
//     string (format.UnchangedPlaceholder).
//
// The key is cut out of the row the value just wrote (after, or before for a delete), so no
// column value is converted twice.
//
// # Value mapping
//
// By type OID (a nil value, SQL NULL, is always null):
//
//	| PostgreSQL type                         | JSON                                                   |
//	|-----------------------------------------|--------------------------------------------------------|
//	| int2, int4, int8, oid                   | number, as rendered: 42, -7                            |
//	| numeric                                 | string, exactly as rendered: "1.50", "NaN", "Infinity" |
//	| float4, float8                          | number as rendered (1.5, -0, 1e+100); NaN, Infinity    |
//	|                                         | and -Infinity as the strings "NaN", "Infinity",        |
//	|                                         | "-Infinity"                                            |
//	| bool                                    | true / false                                           |
//	| text, varchar, bpchar (padded), name,   | string; control characters, quotes and backslashes     |
//	| "char", citext and other unknown types  | escaped; invalid UTF-8 bytes become \ufffd             |
//	| bytea                                   | string, base64 (standard alphabet, padded)             |
//	| uuid                                    | string: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"         |
//	| date                                    | string as rendered: "2024-01-31", "infinity",          |
//	|                                         | "0044-03-15 BC"                                        |
//	| time, timetz                            | string as rendered: "12:34:56.5", "12:34:56.5+05:30"   |
//	| timestamp                               | string, ISO-8601: "2024-01-31T12:34:56.123456";        |
//	|                                         | "infinity", "-infinity" kept; " BC" suffix kept        |
//	| timestamptz                             | string, ISO-8601 UTC: "2024-01-31T12:34:56.123Z";      |
//	|                                         | "0044-03-15T12:00:00Z BC"; infinities kept             |
//	| interval                                | string, postgres style: "1 year 2 mons -3 days         |
//	|                                         | +04:05:06.7"                                           |
//	| json, jsonb                             | the JSON value itself, embedded (surrounding           |
//	|                                         | whitespace trimmed; jsonb's spacing kept)              |
//	| arrays of all of the above              | JSON arrays (nested for multi-dimensional ones) whose  |
//	| (int4[], text[], jsonb[], ...)          | elements follow the element type's mapping; NULL       |
//	|                                         | elements are null; lower bounds ([0:1]={...}) are      |
//	|                                         | dropped                                                |
//	| everything else: enums, domains, money, | string of the text rendering                           |
//	| inet, cidr, macaddr, ranges, geometric, |                                                        |
//	| bit strings, xml, tsvector, arrays of   |                                                        |
//	| these, composite types, ...             |                                                        |
//
// A json or jsonb value that is the JSON literal null is written as null, like SQL NULL; the two
// cannot be told apart in the envelope (nor inside a json[] array).
//
// A domain arrives with its own OID, not its base type's, so it is written as a string even when
// its base type is a number. An array of a type outside the table (enum[], inet[], ...) is one
// string: "{a,b}".
//
// AppendValue returns an error, never invalid JSON, when a text does not parse as its type (an
// integer that is not digits, a bool other than t or f, invalid json, a malformed array literal or
// bytea). PostgreSQL does not render such values; an error means the type OID and the value do not
// belong together.
package json
