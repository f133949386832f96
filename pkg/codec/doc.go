// Package codec turns row changes into Kafka records: the one encoder used by both the snapshot
// stage (COPY in text format, split with SplitCopyText) and the replication stage (pgoutput in
// text format). Both hand it PostgreSQL's text rendering of each value, produced under the same
// pinned session settings (DateStyle=ISO, IntervalStyle=postgres, TimeZone=UTC,
// extra_float_digits=3), so one value yields the same bytes whichever stage read it.
//
// # Records
//
// An Encoder is built per export schema version (a change.Table). Each of Read (op r), Insert (c),
// Update (u), Delete (d) and Truncate (t) appends the records of one change:
//
//   - Topic change.TopicName(prefix, export); Partition change.AnyPartition, except a truncate,
//     which is change.AllPartitions with the key {} (no columns; a compacted topic refuses a
//     null key), or a null key for a keyless table.
//   - Key: a JSON object of the key columns (change.Column.Key) in column order, e.g. {"id":1};
//     nil for a table without key columns.
//   - Value: a Debezium-compatible envelope in compact JSON with a fixed field order:
//     {"before":{..}|null,"after":{..}|null,"source":{"version":"tidemark-1","connector":"tidemark",
//     "name":<prefix>,"db":..,"schema":..,"table":..,"lsn":<commit LSN as a number>,
//     "lsn_text":"X/Y","txId":<xid>,"sequence":<n>,"snapshot":true|false,"attempt":<n, snapshot
//     rows only>,"ts_ms":<commit time, ms>},"op":"c","ts_ms":<encoding time, ms>}.
//   - Headers: tidemark.lsn ("X/Y") and tidemark.op (c, u, d, r, t; a tombstone carries d).
//
// A delete carries the old tuple as PostgreSQL sent it (under REPLICA IDENTITY DEFAULT only the
// key columns; the others are null) and, when Config.Tombstones is set and the table has a key,
// is followed by a tombstone (same key, nil value). Keyless tables get no tombstones: their topics
// are not compacted.
//
// An update whose old key differs from its new key is published as Debezium does: a delete of the
// old key (before = old tuple), its tombstone, and a create (op c) of the new key. All three carry
// the headers tidemark.old_key and tidemark.new_key with both key objects. Any other update is one
// record with op u, whose before is the old tuple when PostgreSQL sent one and null otherwise.
//
// Unchanged TOAST: pgoutput does not send a large out-of-line value that an update left unchanged.
// Such a column takes its value from the old tuple when that has it (REPLICA IDENTITY FULL).
// Otherwise no value is made up: by default (UnchangedOmit) the column is left out of after, and
// the header tidemark.unchanged names the columns left out as a JSON array (["body"]), so a
// consumer merges the update into the row it has (for a key change: the row at tidemark.old_key).
// UnchangedPlaceholder writes Config.Placeholder instead, as a JSON string whatever the column's
// type (Debezium's "__debezium_unavailable_value" by default), and names the columns in the same
// header. A key column that stays unknown fails the change, with an error that says to set
// REPLICA IDENTITY FULL: the record could not be keyed.
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
//
// # json-with-schema
//
// With Config.Format FormatJSONWithSchema, keys and values are Kafka Connect's JsonConverter format
// with schemas.enable=true: {"schema":<Connect schema>,"payload":<the same envelope>}, with the field
// types and semantic names of Debezium's PostgreSQL connector under its defaults
// (decimal.handling.mode=precise, time.precision.mode=adaptive, binary.handling.mode=bytes,
// interval.handling.mode=numeric, hstore.handling.mode=json). docs/value-mapping.md has the mapping table.
// Decisions:
//
//   - The envelope schema (<topic>.Envelope with before/after <topic>.Value, source
//     io.debezium.connector.postgresql.Source, op, ts_ms) and the key schema (<topic>.Key) depend
//     only on the table; NewEncoder builds them once and a record appends its payload after them.
//     Key columns are required fields, all others optional: the stream cannot know NOT NULL (a
//     Relation message does not carry it) and both stages must build identical schemas.
//   - Types are described by nodes built from the column's type OID and typmod: built-in types
//     statically (scalarOf), everything else from a Types catalog (domains resolve to their base
//     type with the domain's typmod, enums carry their labels, composites become structs). The
//     catalog is shared by both stages and never refreshed while the process runs.
//   - Values Connect cannot carry faithfully are refused with ErrNotRepresentable, which fails the
//     export alone: float NaN and infinities (JsonConverter has no way to read them and turns a
//     string into 0), numeric NaN and infinities, timestamps and intervals beyond int64
//     microseconds, non-finite geometric coordinates, money not rendered as $1,234.56. Infinite
//     dates and timestamps follow Debezium's sentinels; timestamptz infinities are the strings
//     "infinity" and "-infinity", as in Debezium.
//   - Arrays are flat Connect arrays (PostgreSQL does not enforce a column's dimensions, so a
//     static schema cannot nest). A column's value with more than one dimension or a lower bound
//     other than 1 is written flattened in row-major order and its shape goes into the
//     HeaderArrayDims header; below the top level (an array inside a composite) such a shape is
//     refused.
//   - An unchanged TOASTed column: UnchangedOmit leaves it out (JsonConverter reads a missing
//     optional field as null); UnchangedPlaceholder writes the placeholder only into string
//     columns and null into the others.
//
// # Performance
//
// The per-row path uses no reflection and no encoding/json: an Encoder appends into reusable
// buffers and copies each finished key and value into a chunked arena, so a row costs a small,
// constant number of allocations. SplitCopyText decodes escapes in place.
package codec
