// Package pgjson is what the two JSON formats share: the plain mapping of PostgreSQL's text
// renderings to JSON values (AppendValue, AppendKind) of pkg/format/json, whose array parser,
// string, number and bytea writers pkg/format/connectjson's Kafka Connect conversion reuses
// (AppendFlatArray with an ElementWriter); the source block and tail of the Debezium envelope
// (SourceHead, AppendTail) and its decoding (DecodeEnvelope); and reading a plain JSON value back
// as PostgreSQL text (AppendText).
package pgjson
