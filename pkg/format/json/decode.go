package json

import (
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
	"github.com/tidemark/cdc/pkg/format/jsonscan"
)

// Decoder reads plain JSON records. Its zero value is ready to use.
type Decoder struct{}

// Decoder returns the format's decoder.
func (Format) Decoder() format.Decoder { return Decoder{} }

// Recognizes reports whether value is an object whose first field is "before", as the encoder
// writes it.
func (Decoder) Recognizes(value []byte) bool { return jsonscan.FirstFieldIs(value, "before") }

// Decode reads the envelope value; the key is the key columns' object itself.
func (Decoder) Decode(r *format.Record, key, value []byte) error {
	*r = format.Record{}
	if err := pgjson.DecodeEnvelope(r, value); err != nil {
		return err
	}
	r.Key = key
	return nil
}

// Key returns key: the key columns' object itself.
func (Decoder) Key(key []byte) []byte { return key }

// Schema returns nil: plain JSON records carry no schema.
func (Decoder) Schema([]byte) (format.Schema, error) { return nil, nil }

// AppendText appends the PostgreSQL text of a column's JSON value read as col's type: bytea
// from base64, arrays from JSON arrays, json and jsonb as the embedded JSON, strings unquoted,
// numbers and booleans as written.
func (Decoder) AppendText(dst, raw []byte, col *format.Column) ([]byte, bool, error) {
	return pgjson.AppendText(dst, raw, col)
}

// AppendJSON appends b: the records are JSON already.
func (Decoder) AppendJSON(dst, b []byte) []byte { return append(dst, b...) }
