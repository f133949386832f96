package avro

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/connectjson"
)

// kind is how one column's PostgreSQL text becomes its Avro value.
type kind uint8

const (
	kString         kind = iota // string: the text as rendered (also the fallback)
	kBool                       // boolean: t/f
	kInt                        // int: int2, int4
	kLong                       // long: int8, oid
	kFloat                      // float (NaN and the infinities too)
	kDouble                     // double
	kDecimal                    // bytes, logicalType decimal at node.scale
	kVarDecimal                 // record io.debezium.data.VariableScaleDecimal {scale, value}
	kMoney                      // bytes, decimal at scale 2, from money_out's "$1,234.56"
	kBytea                      // bytes
	kBit1                       // boolean: bit(1)
	kBits                       // bytes io.debezium.data.Bits
	kDate                       // int, logicalType date
	kTimeMilli                  // int, logicalType time-millis (time(0..3))
	kTimeMicro                  // long, logicalType time-micros
	kTimestampMilli             // long, logicalType timestamp-millis (timestamp(0..3))
	kTimestampMicro             // long, logicalType timestamp-micros
	kZonedTimestamp             // string io.debezium.time.ZonedTimestamp
	kZonedTime                  // string io.debezium.time.ZonedTime
	kInterval                   // long io.debezium.time.MicroDuration
	kJSON                       // string io.debezium.data.Json
	kArray                      // array of ["null", elem]
)

// node is the Avro type of one PostgreSQL type, and how its text converts.
type node struct {
	kind  kind
	scale int32 // kDecimal
	// precision is kDecimal's (and kMoney's) digits.
	precision int32
	schema    string // the Avro schema of the type; for named types their definition
	name      string // the full name of a named type (written by name after its first use)
	elem      *node  // kArray
	label     string // the PostgreSQL type, for errors
}

// isString reports whether the node's values are Avro strings (where a placeholder fits).
func (n *node) isString() bool {
	switch n.kind {
	case kString, kZonedTimestamp, kZonedTime, kJSON:
		return true
	}
	return false
}

const (
	moneyOID   = 790
	maxDepth   = 16
	varDecName = "io.debezium.data.VariableScaleDecimal"
)

// connect returns the Kafka Connect properties Confluent's AvroConverter writes for a Connect
// schema named name: "connect.version":1,"connect.name":name.
func connect(name string) string {
	return `"connect.version":1,"connect.name":"` + name + `"`
}

func str(label, name string) *node {
	if name == "" {
		return &node{kind: kString, schema: `"string"`, label: label}
	}
	return &node{kind: kString, schema: `{"type":"string",` + connect(name) + `}`, label: label}
}

// scalarOf returns the node of a built-in type with typmod mod, false when the type is not one
// with a mapping of its own.
func scalarOf(oid uint32, mod int32) (*node, bool) {
	label := typeLabel(oid)
	switch oid {
	case pgtype.BoolOID:
		return &node{kind: kBool, schema: `"boolean"`, label: label}, true
	case pgtype.Int2OID:
		return &node{kind: kInt, schema: `{"type":"int","connect.type":"int16"}`, label: label}, true
	case pgtype.Int4OID:
		return &node{kind: kInt, schema: `"int"`, label: label}, true
	case pgtype.Int8OID, pgtype.OIDOID:
		return &node{kind: kLong, schema: `"long"`, label: label}, true
	case pgtype.Float4OID:
		return &node{kind: kFloat, schema: `"float"`, label: label}, true
	case pgtype.Float8OID:
		return &node{kind: kDouble, schema: `"double"`, label: label}, true
	case pgtype.NumericOID:
		if mod >= 4 {
			prec := ((mod - 4) >> 16) & 0xffff
			scale := int32(int16(((mod-4)&0x7ff)<<5) >> 5)
			if scale >= 0 && scale <= prec {
				return decimalNode(prec, scale, label), true
			}
		}
		return &node{kind: kVarDecimal, name: varDecName, label: label,
			schema: `{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[` +
				`{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],` +
				`"connect.doc":"Variable scaled decimal",` + connect(varDecName) + `}`}, true
	case moneyOID:
		n := decimalNode(64, 2, label)
		n.kind = kMoney
		return n, true
	case pgtype.ByteaOID:
		return &node{kind: kBytea, schema: `"bytes"`, label: label}, true
	case pgtype.BitOID, pgtype.VarbitOID:
		length := int32(2147483647)
		if mod > 0 {
			length = mod
		} else if oid == pgtype.BitOID {
			length = 1
		}
		if length == 1 {
			// Debezium's boolean; the property tells a reader it is a bit (decode.go writes "1").
			return &node{kind: kBit1, schema: `{"type":"boolean","tidemark.type":"bit"}`, label: label}, true
		}
		return &node{kind: kBits, label: label, schema: `{"type":"bytes","connect.version":1,"connect.parameters":{"length":"` +
			strconv.Itoa(int(length)) + `"},"connect.name":"io.debezium.data.Bits"}`}, true
	case pgtype.DateOID:
		return &node{kind: kDate, schema: `{"type":"int",` + connect("io.debezium.time.Date") + `,"logicalType":"date"}`, label: label}, true
	case pgtype.TimeOID:
		if mod >= 0 && mod <= 3 {
			return &node{kind: kTimeMilli, schema: `{"type":"int",` + connect("io.debezium.time.Time") + `,"logicalType":"time-millis"}`, label: label}, true
		}
		return &node{kind: kTimeMicro, schema: `{"type":"long",` + connect("io.debezium.time.MicroTime") + `,"logicalType":"time-micros"}`, label: label}, true
	case pgtype.TimestampOID:
		if mod >= 0 && mod <= 3 {
			return &node{kind: kTimestampMilli, schema: `{"type":"long",` + connect("io.debezium.time.Timestamp") + `,"logicalType":"timestamp-millis"}`, label: label}, true
		}
		return &node{kind: kTimestampMicro, schema: `{"type":"long",` + connect("io.debezium.time.MicroTimestamp") + `,"logicalType":"timestamp-micros"}`, label: label}, true
	case pgtype.TimestamptzOID:
		n := str(label, "io.debezium.time.ZonedTimestamp")
		n.kind = kZonedTimestamp
		return n, true
	case pgtype.TimetzOID:
		n := str(label, "io.debezium.time.ZonedTime")
		n.kind = kZonedTime
		return n, true
	case pgtype.IntervalOID:
		return &node{kind: kInterval, schema: `{"type":"long",` + connect("io.debezium.time.MicroDuration") + `}`, label: label}, true
	case pgtype.JSONOID, pgtype.JSONBOID:
		n := str(label, "io.debezium.data.Json")
		n.kind = kJSON
		return n, true
	case pgtype.UUIDOID:
		return &node{kind: kString, schema: `{"type":"string",` + connect("io.debezium.data.Uuid") + `,"logicalType":"uuid"}`, label: label}, true
	case pgtype.XMLOID:
		return str(label, "io.debezium.data.Xml"), true
	case pgtype.TSVectorOID:
		return str(label, "io.debezium.data.Tsvector"), true
	}
	if connectjson.StaticType(oid) {
		if _, isArray := builtinArrayElem(oid); !isArray {
			return str(label, ""), true // text, varchar, inet, ranges, geometric types, ...: the text
		}
	}
	return nil, false
}

func decimalNode(prec, scale int32, label string) *node {
	p, s := strconv.Itoa(int(prec)), strconv.Itoa(int(scale))
	return &node{kind: kDecimal, precision: prec, scale: scale, label: label,
		schema: `{"type":"bytes","scale":` + s + `,"precision":` + p + `,"connect.version":1,"connect.parameters":{"scale":"` + s +
			`","connect.decimal.precision":"` + p + `"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}`}
}

// defaultTypeMap knows pgx's built-in types; it is read-only after init.
var defaultTypeMap = pgtype.NewMap()

func typeLabel(oid uint32) string {
	if t, ok := defaultTypeMap.TypeForOID(oid); ok {
		return t.Name
	}
	if oid == moneyOID {
		return "money"
	}
	return fmt.Sprintf("type %d", oid)
}

// builtinArrayElem returns the element type of a built-in array type pgx knows.
func builtinArrayElem(oid uint32) (uint32, bool) {
	if oid >= 16384 {
		return 0, false
	}
	t, ok := defaultTypeMap.TypeForOID(oid)
	if !ok {
		return 0, false
	}
	if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok && ac.ElementType != nil {
		return ac.ElementType.OID, true
	}
	return 0, false
}

// buildNode returns the node of type oid with typmod mod: built-in types statically, the others
// from the catalog (domains as their base type, enums as strings, arrays of their element).
func buildNode(types *format.Types, oid uint32, mod int32, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("type %d: types refer to one another more than %d levels deep", oid, maxDepth)
	}
	if n, ok := scalarOf(oid, mod); ok {
		return n, nil
	}
	if e, ok := builtinArrayElem(oid); ok {
		return arrayNode(types, e, mod, typeLabel(oid), depth)
	}
	ti := types.Get(oid)
	if ti == nil {
		return nil, fmt.Errorf("type %d is not in the type catalog (resolve the table's types first)", oid)
	}
	label := ti.Schema + "." + ti.Name
	switch {
	case ti.IsArray():
		return arrayNode(types, ti.Elem, mod, label, depth)
	case ti.Type == 'd':
		m := mod
		if ti.BaseMod >= 0 {
			m = ti.BaseMod
		}
		return buildNode(types, ti.Base, m, depth+1)
	case ti.Type == 'e':
		var allowed []byte
		for i, l := range ti.Labels {
			if i > 0 {
				allowed = append(allowed, ',')
			}
			allowed = append(allowed, l...)
		}
		return &node{kind: kString, label: label, schema: `{"type":"string","connect.version":1,"connect.parameters":{"allowed":` +
			string(format.AppendJSONString(nil, allowed)) + `},"connect.name":"io.debezium.data.Enum"}`}, nil
	case ti.Type == 'b' && ti.Name == "ltree":
		return str(label, "io.debezium.data.Ltree"), nil
	}
	// Composites, ranges, hstore, citext and other types: their text rendering.
	return str(label, ""), nil
}

// arrayNode is an array of elem. An element type whose literal does not separate elements with
// commas (box) is written as the whole array's text.
func arrayNode(types *format.Types, elem uint32, mod int32, label string, depth int) (*node, error) {
	if elem == pgtype.BoxOID {
		return str(label, ""), nil
	}
	e, err := buildNode(types, elem, mod, depth+1)
	if err != nil {
		return nil, err
	}
	if e.kind == kArray {
		return str(label, ""), nil
	}
	return &node{kind: kArray, elem: e, label: label}, nil
}

// schemaWriter writes Avro schema JSON, each named type defined at its first use only.
type schemaWriter struct {
	b       []byte
	defined map[string]bool
}

func (w *schemaWriter) typ(n *node) {
	switch {
	case n.kind == kArray:
		w.b = append(w.b, `{"type":"array","items":["null",`...)
		w.typ(n.elem)
		w.b = append(w.b, "]}"...)
	case n.name != "" && w.defined[n.name]:
		w.b = strconv.AppendQuote(w.b, n.name)
	default:
		if n.name != "" {
			w.defined[n.name] = true
		}
		w.b = append(w.b, n.schema...)
	}
}

// field writes a record field: required, or optional as ["null", T] with default null.
func (w *schemaWriter) field(name, avro string, n *node, optional bool) {
	w.b = append(w.b, `{"name":`...)
	w.b = format.AppendJSONString(w.b, []byte(avro))
	if avro != name {
		w.b = append(w.b, `,"tidemark.column":`...)
		w.b = format.AppendJSONString(w.b, []byte(name))
	}
	w.b = append(w.b, `,"type":`...)
	if optional {
		w.b = append(w.b, `["null",`...)
		w.typ(n)
		w.b = append(w.b, `],"default":null}`...)
		return
	}
	w.typ(n)
	w.b = append(w.b, '}')
}

// fieldNames returns the Avro field names of t's columns: avroName's, made unique with a suffix
// _2, _3, ... when two columns' names become the same ("a b" and "a_b").
func fieldNames(t *change.Table) []string {
	names := make([]string, len(t.Columns))
	taken := make(map[string]bool, len(t.Columns))
	for _, c := range t.Columns {
		if avroName(c.Name) == c.Name {
			taken[c.Name] = true
		}
	}
	for i, c := range t.Columns {
		n := avroName(c.Name)
		if n != c.Name {
			for k := 2; taken[n]; k++ {
				n = avroName(c.Name) + "_" + strconv.Itoa(k)
			}
			taken[n] = true
		}
		names[i] = n
	}
	return names
}

// avroName makes name a valid Avro name as Debezium's schema.name.adjustment.mode=avro does:
// every character outside [A-Za-z0-9_] becomes '_', and a leading digit gets a '_' before it.
func avroName(name string) string {
	ok := name != "" && !(name[0] >= '0' && name[0] <= '9')
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	if ok {
		return name
	}
	var b strings.Builder
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		b.WriteByte('_')
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// namespace returns the Avro namespace of a topic's records: each dot-separated part an Avro name.
func namespace(topic string) string {
	parts := strings.Split(topic, ".")
	for i, p := range parts {
		parts[i] = avroName(p)
	}
	return strings.Join(parts, ".")
}

// sourceSchema is the source block, with the fields of the JSON formats' source.
const sourceSchema = `{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[` +
	`{"name":"version","type":"string"},` +
	`{"name":"connector","type":"string"},` +
	`{"name":"name","type":"string"},` +
	`{"name":"db","type":"string"},` +
	`{"name":"schema","type":"string"},` +
	`{"name":"table","type":"string"},` +
	`{"name":"lsn","type":["null","long"],"default":null},` +
	`{"name":"lsn_text","type":["null","string"],"default":null},` +
	`{"name":"txId","type":["null","long"],"default":null},` +
	`{"name":"sequence","type":["null","long"],"default":null},` +
	`{"name":"snapshot","type":["null",{"type":"string","connect.version":1,"connect.parameters":{"allowed":"true,false"},"connect.default":"false","connect.name":"io.debezium.data.Enum"}],"default":null},` +
	`{"name":"attempt","type":["null","int"],"default":null},` +
	`{"name":"ts_ms","type":"long"}` +
	`],"connect.name":"io.debezium.connector.postgresql.Source"}`

// schemas are the Avro schemas of one table's records.
type schemas struct {
	value, key, truncKey string
}

// tableSchemas returns the schemas of t's records, whose columns have nodes cols: the envelope
// <ns>.Envelope {before, after: ["null", <ns>.Value], source, op, ts_ms}, the key <ns>.Key of the
// key columns, and <ns>.TruncateKey, the key of a truncate (a record without fields). Key
// columns are required, the others optional: the stream cannot know NOT NULL, and both stages
// must build identical schemas.
func tableSchemas(topic string, t *change.Table, cols []*node) schemas {
	ns := namespace(topic)
	names := fieldNames(t)
	w := &schemaWriter{defined: map[string]bool{}}
	row := func(name string, keysOnly bool) {
		w.b = append(w.b, `{"type":"record","name":"`+name+`","namespace":`...)
		w.b = format.AppendJSONString(w.b, []byte(ns))
		w.b = append(w.b, `,"fields":[`...)
		first := true
		for i, c := range t.Columns {
			if keysOnly && !c.Key {
				continue
			}
			if !first {
				w.b = append(w.b, ',')
			}
			first = false
			w.field(c.Name, names[i], cols[i], !c.Key)
		}
		w.b = append(w.b, `],"connect.name":`...)
		w.b = format.AppendJSONString(w.b, []byte(ns+"."+name))
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, `{"type":"record","name":"Envelope","namespace":`...)
	w.b = format.AppendJSONString(w.b, []byte(ns))
	w.b = append(w.b, `,"fields":[{"name":"before","type":["null",`...)
	row("Value", false)
	w.b = append(w.b, `],"default":null},{"name":"after","type":["null",`...)
	w.b = format.AppendJSONString(w.b, []byte(ns+".Value"))
	w.b = append(w.b, `],"default":null},{"name":"source","type":`+sourceSchema+`},`+
		`{"name":"op","type":"string"},{"name":"ts_ms","type":["null","long"],"default":null}],"connect.version":2,"connect.name":`...)
	w.b = format.AppendJSONString(w.b, []byte(ns+".Envelope"))
	w.b = append(w.b, '}')
	var s schemas
	s.value = string(w.b)

	w = &schemaWriter{defined: map[string]bool{}}
	row("Key", true)
	s.key = string(w.b)
	tk := []byte(`{"type":"record","name":"TruncateKey","namespace":`)
	tk = format.AppendJSONString(tk, []byte(ns))
	tk = append(tk, `,"fields":[],"connect.name":`...)
	tk = format.AppendJSONString(tk, []byte(ns+".TruncateKey"))
	s.truncKey = string(append(tk, '}'))
	return s
}
