package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
	"github.com/tidemark/cdc/pkg/format"
)

// batch is one part as the applier applies it: a part of a cut, or of a table's load (load
// set), turned into an ordered list of steps (reader.go makes it from pkg/consumer's part).
type batch struct {
	// part numbers the parts of one cut (or load) from 0; final is set on the last, which
	// carries position and commits the cut.
	part  int
	final bool
	// load is set on a part of a table's load: its steps go to the loads' transaction.
	load *consumer.Load
	// gone are the tables a cut's events say were removed or failed.
	gone []change.ExportID
	lsn  change.LSN
	// position is the reader's position after the cut, as text; stored in the progress table
	// and handed back to the reader on start.
	position string
	steps    []step
	// txns counts the source transactions the part begins (snapshot copies and loads not
	// counted, a transaction spread over parts once); the progress table keeps the running
	// total, so a test can see that none was applied twice.
	txns int
	// commitTime is the latest source commit time of the cut's transactions (zero if none):
	// the cut's lag is measured from it.
	commitTime time.Time
}

// where names the step's record in an error: " at topic[partition]@offset key {...}".
func (s *step) where() string {
	if s.topic == "" {
		return ""
	}
	return fmt.Sprintf(" (record %s[%d]@%d, key %s)", s.topic, s.partition, s.offset, s.key)
}

// ref names the step's record.
func (s *step) ref() recordRef { return recordRef{s.topic, s.partition, s.offset} }

// joins reports whether the batch joins a table (a cut's first part).
func (b *batch) joins() bool {
	for i := range b.steps {
		if b.steps[i].kind == stepJoin {
			return true
		}
	}
	return false
}

type stepKind uint8

const (
	stepRecord stepKind = iota // a Kafka record of a table: one row change
	stepJoin                   // the table joins: its loaded shadow becomes the table
)

// step is one thing to do in a cut's transaction, in order.
type step struct {
	kind   stepKind
	export change.ExportID
	op     byte            // c, u, d, r or t
	key    json.RawMessage // the key columns as a JSON object
	// before and after are the envelope's images (nil when null).
	before, after json.RawMessage
	// schema is the record's schema as its format writes it (json-with-schema's Connect
	// schema, avro's 4-byte schema id; nil for json), and dec the format's decoder, which reads
	// it and the values.
	schema json.RawMessage
	dec    format.Decoder
	// unchanged: the update leaves unchanged TOAST columns out of after.
	unchanged bool
	// newKey is set on the delete of a key change: the row moves there; oldKey on both halves.
	newKey, oldKey json.RawMessage
	// truncate dedup: cdc writes a truncate to every partition; the reader may pass them all.
	lsn      change.LSN
	sequence int64
	// topic, partition and offset are where the record is, for errors.
	topic     string
	partition int32
	offset    int64
}

// envelope is the part of a record's value the applier reads.
type envelope struct {
	Before map[string]json.RawMessage
	After  map[string]json.RawMessage
	Op     string
}

// record is a decoded record: the envelope, the key's columns and, when the record carries
// one (json-with-schema), its schema of the row's columns.
type record struct {
	env    envelope
	schema format.Schema // nil for json
	dec    format.Decoder
	key    map[string]json.RawMessage
}

// decodeRecord parses a step's key, images and schema.
func decodeRecord(s *step) (*record, error) {
	r := &record{dec: s.decoder()}
	r.env.Op = string(s.op)
	if err := unmarshalKey(s.key, &r.key); err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	for _, img := range []struct {
		raw json.RawMessage
		dst *map[string]json.RawMessage
	}{{s.before, &r.env.Before}, {s.after, &r.env.After}} {
		if len(img.raw) == 0 || string(bytes.TrimSpace(img.raw)) == "null" {
			continue
		}
		if err := json.Unmarshal(img.raw, img.dst); err != nil {
			return nil, fmt.Errorf("read value: %w", err)
		}
	}
	var err error
	if r.schema, err = r.dec.Schema(s.schema); err != nil {
		return nil, err
	}
	return r, nil
}

// unmarshalKey reads a key object ({"id":1}; the consumer's Change carries the key columns'
// object whatever the format).
func unmarshalKey(key []byte, dst *map[string]json.RawMessage) error {
	if len(key) == 0 {
		return nil
	}
	return json.Unmarshal(key, dst)
}

// decoder is the decoder of the step's format.
func (s *step) decoder() format.Decoder {
	if s.dec == nil {
		return defaultDecoder
	}
	return s.dec
}
