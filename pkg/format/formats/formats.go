// Package formats is the list of the record formats Tidemark writes and reads. It is the one
// place a new format is added: one line in All, beside the format's own package.
package formats

import (
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/avro"
	"github.com/tidemark/cdc/pkg/format/connectjson"
	"github.com/tidemark/cdc/pkg/format/json"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// All is every format, by name. The first is the default.
var All = []format.Format{
	json.Format{},
	connectjson.Format{},
	avro.Format{},
}

// Lookup returns the format called name ("" is the default).
func Lookup(name string) (format.Format, bool) {
	if name == "" {
		return All[0], true
	}
	for _, f := range All {
		if f.Name() == name {
			return f, true
		}
	}
	return nil, false
}

// Names returns the formats' names, the default first.
func Names() []string {
	names := make([]string, len(All))
	for i, f := range All {
		names[i] = f.Name()
	}
	return names
}

// decoders are the decoders of All, in its order.
var decoders = func() []format.Decoder {
	d := make([]format.Decoder, len(All))
	for i, f := range All {
		d[i] = f.Decoder()
	}
	return d
}()

// Decoders chooses the decoder of a record's format among All, with a schema registry for the
// formats that read their schemas from one (avro). Without a registry such a format's records
// are refused with the reason. It is safe for concurrent use.
type Decoders struct {
	list []format.Decoder
}

// registryFormat is a format whose decoder reads writer schemas from a schema registry.
type registryFormat interface {
	DecoderWith(reg *schemareg.Client) format.Decoder
}

// NewDecoders returns the decoders of All, those that need one reading from reg (nil: none).
func NewDecoders(reg *schemareg.Client) *Decoders {
	d := &Decoders{list: make([]format.Decoder, len(All))}
	for i, f := range All {
		if rf, ok := f.(registryFormat); ok && reg != nil {
			d.list[i] = rf.DecoderWith(reg)
		} else {
			d.list[i] = f.Decoder()
		}
	}
	return d
}

// For returns the decoder of the first format that recognizes value, else the default format's
// (whose error then says what the value lacks). A nil *Decoders is Decoder's.
func (d *Decoders) For(value []byte) format.Decoder {
	if d == nil {
		return Decoder(value)
	}
	for _, dec := range d.list {
		if dec.Recognizes(value) {
			return dec
		}
	}
	return d.list[0]
}

// Decoder returns the decoder of the first format in All that recognizes value, else the
// default format's (whose error then says what the value lacks). A consumer reads a topic of
// any format with it.
func Decoder(value []byte) format.Decoder {
	for _, d := range decoders {
		if d.Recognizes(value) {
			return d
		}
	}
	return decoders[0]
}
