// Package formats is the list of the record formats Tidemark writes and reads. It is the one
// place a new format is added: one line in All, beside the format's own package.
package formats

import (
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/avro"
	"github.com/tidemark/cdc/pkg/format/connectjson"
	"github.com/tidemark/cdc/pkg/format/json"
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
