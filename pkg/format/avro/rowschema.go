package avro

import (
	"encoding/binary"
	"fmt"

	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// Reading a row's columns from the writer schema: a Record's Schema is the 4-byte id of its
// value's schema, and Schema returns the columns of the envelope's row record (<topic>.Value),
// each with the PostgreSQL type a table created for it gets (tidemark-apply's
// APPLY_CREATE_TABLES) and the reading of its values that the Avro type calls for.

// rowSchema is the row record of one envelope schema.
type rowSchema struct {
	fields []format.Field
	byName map[string]*rowField
}

// rowField is one column of a row record.
type rowField struct {
	name string
	n    *snode
	col  format.Column // how pgjson reads the value the decoder wrote for it
}

// Schema returns the row's columns of the envelope schema whose id b is (a Record's Schema),
// nil for an empty b. The schema is fetched from the registry once per id.
func (d *Decoder) Schema(b []byte) (format.Schema, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) != headerSize-1 {
		return nil, fmt.Errorf("avro schema reference of %d bytes, want a 4-byte schema id", len(b))
	}
	id := schemareg.ID(binary.BigEndian.Uint32(b))
	if s, ok := d.rows.Load(id); ok {
		return s.(*rowSchema), nil
	}
	n, err := d.schemaByID(id)
	if err != nil {
		return nil, err
	}
	s, err := newRowSchema(n)
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	d.rows.Store(id, s)
	return s, nil
}

// newRowSchema finds the row record in an envelope's after (or before) field.
func newRowSchema(env *snode) (*rowSchema, error) {
	if env.typ != "record" {
		return nil, fmt.Errorf("not an envelope record")
	}
	for _, f := range env.fields {
		if f.name != "after" && f.name != "before" {
			continue
		}
		row := nonNull(f.typ)
		if row == nil || row.typ != "record" {
			return nil, fmt.Errorf("field %s is not a row record", f.name)
		}
		s := &rowSchema{byName: make(map[string]*rowField, len(row.fields))}
		for _, rf := range row.fields {
			name := rf.name
			if rf.column != "" {
				name = rf.column
			}
			c := &rowField{name: name, n: nonNull(rf.typ), col: columnOf(nonNull(rf.typ))}
			s.fields = append(s.fields, c)
			s.byName[name] = c
		}
		return s, nil
	}
	return nil, fmt.Errorf("an envelope without before or after")
}

// nonNull is a union's branch that is not null (["null", T] is an optional T), or n itself.
func nonNull(n *snode) *snode {
	if n == nil || n.typ != "union" {
		return n
	}
	for _, b := range n.branches {
		if b.typ != "null" {
			return b
		}
	}
	return nil
}

// columnOf is how pgjson reads the JSON the decoder writes for a value of n.
func columnOf(n *snode) format.Column {
	if n == nil {
		return format.Column{}
	}
	switch {
	case n.typ == "array":
		elem := columnOf(nonNull(n.items))
		return format.Column{Elem: &elem}
	case n.connect == "io.debezium.data.Json":
		return format.Column{IsJSON: true}
	case n.typ == "bytes" && n.logical == "" && n.connect == "", n.typ == "fixed" && n.logical == "":
		return format.Column{IsBytea: true}
	}
	return format.Column{}
}

func (s *rowSchema) Fields() []format.Field { return s.fields }

// Field returns the column called name; a nil interface when there is none.
func (s *rowSchema) Field(name string) format.Field {
	if f, ok := s.byName[name]; ok {
		return f
	}
	return nil
}

func (f *rowField) Name() string { return f.name }

// AppendText appends the PostgreSQL text of raw, the column's value as the decoder wrote it.
func (f *rowField) AppendText(dst, raw []byte) ([]byte, bool, error) {
	return pgjson.AppendText(dst, raw, &f.col)
}

// PGType is the type of a column created for the field: Debezium's semantic names first (the
// choices of json-with-schema's), then Avro's logical types, then the Avro type.
func (f *rowField) PGType() (string, error) { return pgTypeOf(f.n, 0) }

var pgTypeByConnect = map[string]string{
	"org.apache.kafka.connect.data.Decimal": "numeric", varDecName: "numeric",
	"io.debezium.time.Date": "date", "io.debezium.time.MicroTimestamp": "timestamp", "io.debezium.time.Timestamp": "timestamp",
	"io.debezium.time.ZonedTimestamp": "timestamptz", "io.debezium.time.MicroTime": "time", "io.debezium.time.Time": "time",
	"io.debezium.time.ZonedTime": "timetz", "io.debezium.time.MicroDuration": "interval", "io.debezium.data.Uuid": "uuid",
	"io.debezium.data.Json": "jsonb", "io.debezium.data.Xml": "xml", "io.debezium.data.Tsvector": "tsvector",
	"io.debezium.data.Enum": "text", "io.debezium.data.Ltree": "text", "io.debezium.data.Bits": "bit varying",
}

var pgTypeByLogical = map[string]string{
	"decimal": "numeric", "date": "date", "time-millis": "time", "time-micros": "time",
	"timestamp-millis": "timestamp", "timestamp-micros": "timestamp", "uuid": "uuid",
}

var pgTypeByAvro = map[string]string{
	"boolean": "boolean", "int": "integer", "long": "bigint", "float": "real", "double": "double precision",
	"string": "text", "bytes": "bytea", "fixed": "bytea", "enum": "text",
}

func pgTypeOf(n *snode, depth int) (string, error) {
	if n == nil {
		return "", fmt.Errorf("a column of type null")
	}
	if t, ok := pgTypeByConnect[n.connect]; ok {
		return t, nil
	}
	if t, ok := pgTypeByLogical[n.logical]; ok {
		return t, nil
	}
	switch {
	case n.typ == "boolean" && n.pgType == "bit":
		return "bit varying", nil
	case n.typ == "int" && n.connectType == "int16":
		return "smallint", nil
	case n.typ == "array":
		if depth > 0 {
			return "", fmt.Errorf("an array of arrays (tidemark writes arrays flat)")
		}
		t, err := pgTypeOf(nonNull(n.items), depth+1)
		return t + "[]", err
	}
	if t, ok := pgTypeByAvro[n.typ]; ok {
		return t, nil
	}
	return "", fmt.Errorf("no PostgreSQL type for Avro %s %s: create the table yourself", n.typ, n.name)
}
