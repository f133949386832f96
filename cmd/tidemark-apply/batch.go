package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// batch is one cut as the applier applies it: the reader's cut turned into an ordered list of
// steps (reader.go makes it from pkg/consumer's cut).
type batch struct {
	lsn change.LSN
	// position is the reader's position after the cut, as text; stored in the progress table
	// and handed back to the reader on start.
	position string
	steps    []step
	// txns counts the source transactions in the cut (snapshot copies not counted); the
	// progress table keeps the running total, so a test can see that none was applied twice.
	txns int
	// commitTime is the latest source commit time of the cut's transactions (zero if none):
	// the cut's lag is measured from it.
	commitTime time.Time
}

type stepKind uint8

const (
	stepRecord stepKind = iota // a Kafka record of a table: one row change
	stepReset                  // a new copy of the table follows: clear it
)

// step is one thing to do in a cut's transaction, in order.
type step struct {
	kind   stepKind
	export change.ExportID
	key    []byte // the record's key (JSON)
	value  []byte // the record's value (the envelope); nil for a tombstone
	// Headers the applier reads (pkg/codec): the columns an update leaves out, and a key
	// change's new key.
	unchanged []byte
	newKey    []byte
}

// envelope is the part of a record's value the applier reads.
type envelope struct {
	Before map[string]json.RawMessage `json:"before"`
	After  map[string]json.RawMessage `json:"after"`
	Op     string                     `json:"op"`
	Source struct {
		Snapshot bool   `json:"snapshot"`
		TsMs     int64  `json:"ts_ms"`
		TxID     int64  `json:"txId"`
		LSN      uint64 `json:"lsn"`
		Sequence int64  `json:"sequence"`
	} `json:"source"`
}

// connectMessage is a json-with-schema record: Connect's schema and the envelope as payload.
type connectMessage struct {
	Schema  *connectField   `json:"schema"`
	Payload json.RawMessage `json:"payload"`
}

// record is a decoded record: the envelope and, for json-with-schema, the fields of its
// value struct and the key's column names.
type record struct {
	env    envelope
	fields map[string]*connectField // nil for json
	schema []connectField           // the value's fields in order (json-with-schema)
	key    map[string]json.RawMessage
}

// decodeRecord parses a record's key and value in either format.
func decodeRecord(key, value []byte) (*record, error) {
	r := &record{}
	if err := unmarshalKey(key, &r.key); err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	v := bytes.TrimSpace(value)
	if bytes.HasPrefix(v, []byte(`{"schema"`)) {
		var m connectMessage
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, fmt.Errorf("read value: %w", err)
		}
		if err := json.Unmarshal(m.Payload, &r.env); err != nil {
			return nil, fmt.Errorf("read value: %w", err)
		}
		if m.Schema != nil {
			for _, f := range m.Schema.Fields {
				if f.Field == "after" || f.Field == "before" && r.fields == nil {
					r.schema = f.Fields
					r.fields = make(map[string]*connectField, len(f.Fields))
					for i := range f.Fields {
						r.fields[f.Fields[i].Field] = &f.Fields[i]
					}
				}
			}
		}
		return r, nil
	}
	if err := json.Unmarshal(v, &r.env); err != nil {
		return nil, fmt.Errorf("read value: %w", err)
	}
	return r, nil
}

// unmarshalKey reads a key object, plain ({"id":1}) or json-with-schema ({"schema":..,"payload":{"id":1}}).
func unmarshalKey(key []byte, dst *map[string]json.RawMessage) error {
	if len(key) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(key, &m); err != nil {
		return err
	}
	if p, ok := m["payload"]; ok && len(m) == 2 && m["schema"] != nil {
		return json.Unmarshal(p, dst)
	}
	*dst = m
	return nil
}
