// Package connectjson is the json-with-schema record format (CDC_VALUE_FORMAT=json-with-schema):
// its per-table encoder, and (decode.go) its decoder.
//
// Keys and values are Kafka Connect's JsonConverter format with schemas.enable=true:
// {"schema":<Connect schema>,"payload":<the envelope of pkg/format/json>}, with the field types
// and semantic names of Debezium's PostgreSQL connector under its defaults
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
//     statically (pgjson.scalarOf), everything else from a Types catalog (domains resolve to their base
//     type with the domain's typmod, enums carry their labels, composites become structs). The
//     catalog is shared by both stages and never refreshed while the process runs.
//   - Values Connect cannot carry faithfully are refused with format.ErrNotRepresentable, which fails the
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
package connectjson
