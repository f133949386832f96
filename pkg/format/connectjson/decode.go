package connectjson

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
	"github.com/tidemark/cdc/pkg/format/jsonscan"
)

// Decoder reads json-with-schema records. Its zero value is ready to use.
type Decoder struct{}

// Decoder returns the format's decoder.
func (Format) Decoder() format.Decoder { return Decoder{} }

// Recognizes reports whether value is an object whose first field is "schema" or "payload".
func (Decoder) Recognizes(value []byte) bool {
	return jsonscan.FirstFieldIs(value, "schema") || jsonscan.FirstFieldIs(value, "payload")
}

// Decode reads {"schema":..,"payload":<envelope>}: r's images are the payload's, r.Schema the
// value's Connect schema, r.Key the key's payload.
func (Decoder) Decode(r *format.Record, key, value []byte) error {
	*r = format.Record{}
	var schema, payload []byte
	if !jsonscan.EachField(value, func(name string, v []byte) {
		switch name {
		case "schema":
			schema = v
		case "payload":
			payload = v
		}
	}) {
		return envelopeError("value is not a JSON object")
	}
	if schema == nil || payload == nil {
		return envelopeError("value has no schema and payload")
	}
	if err := pgjson.DecodeEnvelope(r, payload); err != nil {
		return err
	}
	r.Schema = schema
	r.Key = payloadOf(key)
	return nil
}

// Key returns the payload of a json-with-schema key ({"schema":...,"payload":{...}}), or key
// itself when it has none.
func (Decoder) Key(key []byte) []byte { return payloadOf(key) }

func payloadOf(b []byte) []byte {
	if b == nil {
		return nil
	}
	var pl []byte
	if jsonscan.EachField(b, func(name string, v []byte) {
		if name == "payload" {
			pl = v
		}
	}) && pl != nil {
		return pl
	}
	return b
}

func envelopeError(msg string) error { return fmt.Errorf("%w: %s", format.ErrEnvelope, msg) }

// Schema parses a value's Connect schema: the fields of its after struct (else before's).
func (Decoder) Schema(b []byte) (format.Schema, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var env field
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	var s *schema
	for _, f := range env.Fields {
		if f.Field == "after" || f.Field == "before" && s == nil {
			s = &schema{byName: make(map[string]*field, len(f.Fields))}
			s.cols = make([]format.Field, len(f.Fields))
			for i := range f.Fields {
				s.byName[f.Fields[i].Field] = &f.Fields[i]
				s.cols[i] = readField{&f.Fields[i]}
			}
		}
	}
	if s == nil {
		return nil, nil
	}
	return s, nil
}

// AppendText reads a value the schema does not describe as plain JSON does.
func (Decoder) AppendText(dst, raw []byte, col *format.Column) ([]byte, bool, error) {
	return pgjson.AppendText(dst, raw, col)
}

// schema is a value's row fields.
type schema struct {
	byName map[string]*field
	cols   []format.Field
}

func (s *schema) Field(name string) format.Field {
	if f := s.byName[name]; f != nil {
		return readField{f}
	}
	return nil
}

func (s *schema) Fields() []format.Field { return s.cols }

// readField is a row field of a schema as a format.Field.
type readField struct{ f *field }

func (c readField) Name() string            { return c.f.Field }
func (c readField) PGType() (string, error) { return pgTypeOf(c.f) }

func (c readField) AppendText(dst, raw []byte) ([]byte, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return dst, false, nil
	}
	dst, err := appendConnect(dst, raw, c.f)
	return dst, err == nil, err
}

// AppendJSON appends b: the records are JSON already.
func (Decoder) AppendJSON(dst, b []byte) []byte { return append(dst, b...) }
