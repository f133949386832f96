package json

import "github.com/tidemark/cdc/pkg/format/internal/pgjson"

// AppendValue appends the JSON value of one column value: text is PostgreSQL's text rendering of
// a value of type typeOID (nil for NULL). See the package documentation for the mapping.
func AppendValue(dst []byte, typeOID uint32, text []byte) ([]byte, error) {
	return pgjson.AppendValue(dst, typeOID, text)
}
