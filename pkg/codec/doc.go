// Package codec turns row changes into Kafka records: the one encoder used by both the snapshot
// stage (COPY in text format, split with SplitCopyText) and the replication stage (pgoutput in
// text format). Both hand it PostgreSQL's text rendering of each value, produced under the same
// pinned session settings (DateStyle=ISO, IntervalStyle=postgres, TimeZone=UTC,
// extra_float_digits=3), so one value yields the same bytes whichever stage read it.
//
// codec is the format-free envelope layer: which records a change becomes (ops, key changes,
// tombstones, truncates), unchanged TOAST, headers, the record size limit and the arena the
// records' bytes live in. The bytes of each record's key and value are the format's
// (Config.Format names one of pkg/format/formats): a format.TableEncoder per table writes them,
// with one call per record. pkg/format/json documents the plain JSON format and its value
// mapping, pkg/format/connectjson json-with-schema.
//
// # Records
//
// An Encoder is built per export schema version (a change.Table). Each of Read (op r), Insert (c),
// Update (u), Delete (d) and Truncate (t) appends the records of one change:
//
//   - Topic change.TopicName(prefix, export); Partition change.AnyPartition, except a truncate,
//     which is change.AllPartitions with the key {} (no columns; a compacted topic refuses a
//     null key), or a null key for a keyless table.
//   - Key: the key columns (change.Column.Key) in the format (json: an object in column order,
//     e.g. {"id":1}); nil for a table without key columns.
//   - Value: a Debezium-compatible envelope (before, after, source, op, ts_ms) in the format.
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
// # Performance
//
// The per-row path uses no reflection and no encoding/json: the format appends each record's
// value and key straight into a chunked arena, so a row costs a small, constant number of
// allocations (none in the steady state). SplitCopyText decodes escapes in place.
package codec
