package codec

import (
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/avro"
	"github.com/tidemark/cdc/pkg/format/connectjson"
	"github.com/tidemark/cdc/pkg/format/formats"
	"github.com/tidemark/cdc/pkg/format/json"
)

// Format names a record format (CDC_VALUE_FORMAT); pkg/format/formats lists them.
type Format string

// The formats the stages are configured with by name.
const (
	// FormatJSON is the default: plain JSON envelopes (pkg/format/json).
	FormatJSON Format = json.Name
	// FormatJSONWithSchema is Kafka Connect's JsonConverter format with schemas.enable=true
	// (pkg/format/connectjson).
	FormatJSONWithSchema Format = connectjson.Name
	// FormatAvro is Avro in Confluent's wire format with Debezium's schemas, registered in a
	// schema registry (pkg/format/avro).
	FormatAvro Format = avro.Name
)

// The type catalog is the format package's; the stages build it through these names.
type (
	Types         = format.Types
	TypeInfo      = format.TypeInfo
	LoadTypesFunc = format.LoadTypesFunc
)

// ErrTypeNotFound is wrapped when a column's type is not in pg_type (dropped since the table's
// schema was read): permanent for that export.
var ErrTypeNotFound = format.ErrTypeNotFound

// NewTypes returns an empty catalog that reads missing types with load.
func NewTypes(load LoadTypesFunc) *Types { return format.NewTypes(load) }

// Formats returns the name of every format (pkg/format/formats), the default first.
func Formats() []Format {
	names := formats.Names()
	out := make([]Format, len(names))
	for i, n := range names {
		out[i] = Format(n)
	}
	return out
}
