package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
)

// schemas finds the Connect schema of json-with-schema records, which pkg/consumer strips: it
// reads the record of a table's first change once (per session, and again when a change
// carries a column the schema lacks, after a schema change) and keeps the value's schema, or
// nil when the records are plain json.
type schemas struct {
	opts   []kgo.Opt // brokers and security
	byName map[change.ExportID]*tableSchema
}

type tableSchema struct {
	raw    json.RawMessage // the value's "schema"; nil for plain json
	fields map[string]bool // the after/before struct's field names
}

// of returns the schema for ch (nil for plain json).
func (s *schemas) of(ctx context.Context, ch *consumer.Change) (json.RawMessage, error) {
	ts := s.byName[ch.Export]
	if ts != nil && (ts.raw == nil || ts.covers(ch.After)) {
		return ts.raw, nil
	}
	value, err := s.fetch(ctx, ch.Topic, ch.Partition, ch.Offset)
	if err != nil {
		return nil, fmt.Errorf("read the schema of %s at %s[%d]@%d: %w", ch.Export, ch.Topic, ch.Partition, ch.Offset, err)
	}
	ts = &tableSchema{fields: map[string]bool{}}
	var m connectMessage
	if bytes.HasPrefix(bytes.TrimSpace(value), []byte(`{"schema"`)) && json.Unmarshal(value, &m) == nil && m.Schema != nil {
		ts.raw, _ = json.Marshal(m.Schema)
		for _, f := range m.Schema.Fields {
			if f.Field == "after" || f.Field == "before" {
				for _, c := range f.Fields {
					ts.fields[c.Field] = true
				}
			}
		}
	}
	s.byName[ch.Export] = ts
	return ts.raw, nil
}

// covers reports whether every column of the image is in the schema.
func (ts *tableSchema) covers(image json.RawMessage) bool {
	if len(image) == 0 {
		return true
	}
	var cols map[string]json.RawMessage
	if json.Unmarshal(image, &cols) != nil {
		return true
	}
	for c := range cols {
		if !ts.fields[c] {
			return false
		}
	}
	return true
}

// fetch reads the value of one record.
func (s *schemas) fetch(ctx context.Context, topic string, partition int32, offset int64) ([]byte, error) {
	cl, err := kgo.NewClient(append(s.opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, ferr
		}
		for _, r := range fs.Records() {
			if r.Offset == offset {
				return r.Value, nil
			}
			if r.Offset > offset {
				return nil, fmt.Errorf("record gone (compacted?)")
			}
		}
	}
}

// connectMessage is a json-with-schema record value: Connect's schema and the envelope.
type connectMessage struct {
	Schema  *connectField   `json:"schema"`
	Payload json.RawMessage `json:"payload"`
}
