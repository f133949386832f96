// Package pgjson converts PostgreSQL's text rendering of values into JSON, for the two JSON
// formats: the plain mapping (AppendValue, AppendKind) of pkg/format/json, and Kafka Connect's
// (BuildNode, AppendSchema, Converter.AppendConnect) of pkg/format/connectjson, which shares the
// array parser and the string, number and bytea writers of the plain one. It also writes the
// source block and tail of the Debezium envelope both formats share (SourceHead, AppendTail).
package pgjson
