// Package avro is the Avro record format (CDC_VALUE_FORMAT=avro): Confluent's wire format with
// the schemas Debezium's Avro converter writes for its PostgreSQL connector, registered in a
// schema registry (pkg/schemareg). Its per-table encoder is encoder.go, its decoder decode.go.
//
// # Records
//
// Keys and values are Confluent's wire format: the magic byte 0, the schema's registry id in 4
// big-endian bytes, then the Avro binary encoding of the datum. Subjects follow the topic
// (TopicNameStrategy): <topic>-value for values, <topic>-key for keys. Schemas, for a topic
// <prefix>.<schema>.<table> (every part made a valid Avro name as Debezium's
// schema.name.adjustment.mode=avro does: other characters become '_'):
//
//   - Value: record <topic>.Envelope {before: ["null", <topic>.Value], after: ["null",
//     <topic>.Value], source: io.debezium.connector.postgresql.Source, op: string, ts_ms:
//     ["null", long]}. There is no transaction block: the JSON envelopes carry none.
//   - <topic>.Value: one field per column in column order. Key columns are required, the others
//     ["null", T] with default null: the stream cannot know NOT NULL (a Relation message does
//     not carry it), and the snapshot and the stream must build identical schemas. A column
//     whose name is not a valid Avro name gets one (other characters '_', then a suffix _2, _3
//     when two columns would get the same) and a "tidemark.column" property with its name.
//   - source: the fields of the JSON formats' source block: version, connector, name, db,
//     schema, table (strings), lsn, txId, sequence (["null", long]), lsn_text (["null",
//     string]), snapshot (["null", string], io.debezium.data.Enum "true"/"false"), attempt
//     (["null", int], snapshot rows only), ts_ms (long).
//   - Key: record <topic>.Key of the key columns. A truncate's key (a compacted topic refuses
//     a null key) is <topic>.TruncateKey, a record without fields, registered under the
//     subject <topic>-truncate-key so that <topic>-key keeps one shape.
//
// Types follow Debezium's defaults (decimal.handling.mode=precise, time.precision.mode=adaptive,
// interval.handling.mode=numeric), with the Kafka Connect properties ("connect.name", ...)
// Confluent's AvroConverter writes and Avro's logical types where they apply:
//
//	| PostgreSQL                    | Avro                                                        |
//	|-------------------------------|-------------------------------------------------------------|
//	| bool, bit(1)                  | boolean                                                     |
//	| int2, int4                    | int (int2: "connect.type":"int16")                          |
//	| int8, oid                     | long                                                        |
//	| float4, float8                | float, double (NaN and the infinities too)                  |
//	| numeric(p,s)                  | bytes, logicalType decimal, precision p, scale s            |
//	|                               | (org.apache.kafka.connect.data.Decimal)                     |
//	| numeric                       | record io.debezium.data.VariableScaleDecimal {scale: int,   |
//	|                               | value: bytes}                                               |
//	| money                         | bytes, decimal scale 2                                      |
//	| bytea                         | bytes                                                       |
//	| bit(n), varbit                | bytes io.debezium.data.Bits                                 |
//	| date                          | int, logicalType date (io.debezium.time.Date)               |
//	| time(0-3), time               | int time-millis (io.debezium.time.Time), long time-micros   |
//	|                               | (io.debezium.time.MicroTime)                                |
//	| timestamp(0-3), timestamp     | long timestamp-millis (io.debezium.time.Timestamp), long    |
//	|                               | timestamp-micros (io.debezium.time.MicroTimestamp)          |
//	| timestamptz                   | string io.debezium.time.ZonedTimestamp: ISO-8601 in UTC     |
//	| timetz                        | string io.debezium.time.ZonedTime                           |
//	| interval                      | long io.debezium.time.MicroDuration                         |
//	| json, jsonb                   | string io.debezium.data.Json                                |
//	| uuid                          | string, logicalType uuid (io.debezium.data.Uuid)            |
//	| xml, tsvector, ltree          | string io.debezium.data.Xml, Tsvector, Ltree                |
//	| enums                         | string io.debezium.data.Enum (allowed: the labels)          |
//	| domains                       | their base type                                             |
//	| arrays of the above           | array of ["null", element], flattened (see below)           |
//	| everything else (text, inet,  | string: the text rendering                                  |
//	| ranges, geometric, composite, |                                                             |
//	| hstore, ...)                  |                                                             |
//
// Infinite dates and timestamps are Debezium's sentinels. Values Avro cannot carry faithfully
// wrap format.ErrNotRepresentable and fail their export alone: numeric NaN and infinities
// (decimal has none), timestamps and intervals beyond int64 microseconds.
//
// Arrays are one flat Avro array in row-major order, whatever their dimensions (PostgreSQL does
// not enforce a column's dimensions, so a schema cannot nest); a value of several dimensions or
// with a lower bound other than 1 is flattened, and the header HeaderArrayDims (the same as
// json-with-schema's) gives its shape per row image: {"after":{"grid":"[1:2][1:3]"}}.
//
// An unchanged TOASTed column is null in after (its field is optional), or, under
// UnchangedPlaceholder, the placeholder in a string column; the envelope layer's header names it.
//
// # Registration
//
// Prepare builds the table's schemas and registers them (or finds them registered) under their
// subjects before NewEncoder is called; NewEncoder takes the ids from the registry client's
// cache only, so no record carries an id the registry did not return. The envelope layer builds
// a new encoder when a table's columns change, which registers the new shape as a new version;
// a shape the subject's compatibility level refuses is an error wrapping
// *schemareg.IncompatibleError, naming the subject and the fix. Such a refusal, and a schema the
// registry refuses as invalid (HTTP 422), wrap format.ErrSchemaRefused: the table's alone.
//
// # Encoding
//
// Per table, a plan of one node per column turns PostgreSQL's text values into Avro binary
// (zig-zag varints, length-prefixed bytes, little-endian floats) appended to the caller's
// buffer, with one dynamic call per record and no allocation per value (numeric beyond 18
// digits excepted). The key is the key columns' bytes cut out of the row just written: key
// columns are required in both records, so their encodings are the same.
//
// # Decoding
//
// The Decoder (NewDecoder) reads the header, fetches the writer schema by id (cached, parsed
// once), and writes the images and the key as JSON objects whose values are what the json
// format writes (numeric as a string of its digits, dates, times and timestamps as PostgreSQL
// text, bytea in base64, json embedded, an interval as "<n> microseconds"), so a consumer reads
// them back as it reads json. A Record's Schema is the value's schema id: Schema returns the row
// record's columns from it, with the PostgreSQL type a created table gets (tidemark-apply's
// APPLY_CREATE_TABLES: Debezium's semantic names as json-with-schema maps them, then Avro's
// logical types, then the Avro type; a bit string is bit varying). As in the json format, a json
// or jsonb holding the JSON literal null reads back as SQL NULL (the Avro datum tells them
// apart: a string "null" against the null branch).
package avro
