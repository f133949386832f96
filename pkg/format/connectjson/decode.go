package connectjson

import (
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
