package connectjson

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
)

// conv is how one json-with-schema node turns PostgreSQL text into its payload.
type conv uint8

const (
	cvString conv = iota
	cvBool
	cvInt            // int16/int32/int64: digits as rendered
	cvFloat          // float32/float64; NaN and infinities refused
	cvDecimal        // org.apache.kafka.connect.data.Decimal at node.scale
	cvVarDecimal     // io.debezium.data.VariableScaleDecimal
	cvMoney          // Decimal, scale 2
	cvBytea          // bytes
	cvBit1           // bit(1), varbit(1): boolean
	cvBits           // io.debezium.data.Bits
	cvDate           // io.debezium.time.Date
	cvTimeMilli      // io.debezium.time.Time
	cvTimeMicro      // io.debezium.time.MicroTime
	cvTimestampMilli // io.debezium.time.Timestamp
	cvTimestampMicro // io.debezium.time.MicroTimestamp
	cvZonedTimestamp // io.debezium.time.ZonedTimestamp
	cvZonedTime      // io.debezium.time.ZonedTime
	cvInterval       // io.debezium.time.MicroDuration
	cvJSON           // io.debezium.data.Json: the document as a string
	cvPoint
	cvLine
	cvCircle
	cvBox
	cvLseg
	cvPath
	cvPolygon
	cvArray
	cvStruct // composite type
	cvHstore // hstore (extension): io.debezium.data.Json of an object of strings
)

// Node is the json-with-schema description of one type: its Connect schema and how its values
// are converted.
type node struct {
	conv    conv
	typ     string // Connect schema type
	name    string // logical name, "" for none
	version int
	params  [][2]string
	fields  string // fixed "fields" JSON of the Debezium structs (point, geometry, ...)
	scale   int32  // cvDecimal
	label   string // type name for errors
	elem    *node  // cvArray
	members []member
}

type member struct {
	name []byte // `"name":`
	n    *node
}

var (
	pointFields = `[{"type":"double","optional":false,"field":"x"},{"type":"double","optional":false,"field":"y"},` +
		`{"type":"bytes","optional":true,"field":"wkb"},{"type":"int32","optional":true,"field":"srid"}]`
	geometryFields = `[{"type":"bytes","optional":false,"field":"wkb"},{"type":"int32","optional":true,"field":"srid"},` +
		`{"type":"map","keys":{"type":"string","optional":false},"values":{"type":"string","optional":false},"optional":true,"field":"extensions"}]`
	circleFields = `[{"type":"struct","fields":` + pointFields + `,"optional":false,"name":"io.debezium.data.geometry.Point","version":1,"field":"center"},` +
		`{"type":"double","optional":false,"field":"radius"}]`
	lineFields = `[{"type":"double","optional":false,"field":"a"},{"type":"double","optional":false,"field":"b"},` +
		`{"type":"double","optional":false,"field":"c"}]`
	varDecimalFields = `[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}]`
)

// Money and time OIDs pgtype has no constant for.
const (
	moneyOID   = 790
	tsqueryOID = 3615
)

// scalarOf returns the json-with-schema node of a built-in scalar type, before its typmod is
// applied (see withMod).
func scalarOf(oid uint32) (*node, bool) {
	str := func(name string) *node {
		n := &node{conv: cvString, typ: "string", name: name, label: typeLabel(oid)}
		if name != "" {
			n.version = 1
		}
		return n
	}
	switch oid {
	case pgtype.BoolOID:
		return &node{conv: cvBool, typ: "boolean"}, true
	case pgtype.Int2OID:
		return &node{conv: cvInt, typ: "int16", label: "int2"}, true
	case pgtype.Int4OID:
		return &node{conv: cvInt, typ: "int32", label: "int4"}, true
	case pgtype.Int8OID, pgtype.OIDOID:
		return &node{conv: cvInt, typ: "int64", label: typeLabel(oid)}, true
	case pgtype.Float4OID:
		return &node{conv: cvFloat, typ: "float", label: "float4"}, true
	case pgtype.Float8OID:
		return &node{conv: cvFloat, typ: "double", label: "float8"}, true
	case pgtype.NumericOID:
		return &node{conv: cvVarDecimal, typ: "struct", name: "io.debezium.data.VariableScaleDecimal", version: 1, fields: varDecimalFields, label: "numeric"}, true
	case moneyOID:
		return &node{conv: cvMoney, typ: "bytes", name: "org.apache.kafka.connect.data.Decimal", version: 1,
			params: [][2]string{{"scale", "2"}}, scale: 2, label: "money"}, true
	case pgtype.ByteaOID:
		return &node{conv: cvBytea, typ: "bytes"}, true
	case pgtype.BitOID, pgtype.VarbitOID:
		return &node{conv: cvBits, typ: "bytes", name: "io.debezium.data.Bits", version: 1, label: typeLabel(oid)}, true
	case pgtype.DateOID:
		return &node{conv: cvDate, typ: "int32", name: "io.debezium.time.Date", version: 1, label: "date"}, true
	case pgtype.TimeOID:
		return &node{conv: cvTimeMicro, typ: "int64", name: "io.debezium.time.MicroTime", version: 1, label: "time"}, true
	case pgtype.TimestampOID:
		return &node{conv: cvTimestampMicro, typ: "int64", name: "io.debezium.time.MicroTimestamp", version: 1, label: "timestamp"}, true
	case pgtype.TimestamptzOID:
		return &node{conv: cvZonedTimestamp, typ: "string", name: "io.debezium.time.ZonedTimestamp", version: 1, label: "timestamptz"}, true
	case pgtype.TimetzOID:
		return &node{conv: cvZonedTime, typ: "string", name: "io.debezium.time.ZonedTime", version: 1, label: "timetz"}, true
	case pgtype.IntervalOID:
		return &node{conv: cvInterval, typ: "int64", name: "io.debezium.time.MicroDuration", version: 1, label: "interval"}, true
	case pgtype.JSONOID, pgtype.JSONBOID:
		n := str("io.debezium.data.Json")
		n.conv = cvJSON
		return n, true
	case pgtype.XMLOID:
		return str("io.debezium.data.Xml"), true
	case pgtype.UUIDOID:
		return str("io.debezium.data.Uuid"), true
	case pgtype.TSVectorOID:
		return str("io.debezium.data.Tsvector"), true
	case pgtype.PointOID:
		return &node{conv: cvPoint, typ: "struct", name: "io.debezium.data.geometry.Point", version: 1, fields: pointFields, label: "point"}, true
	case pgtype.BoxOID, pgtype.LsegOID, pgtype.PathOID, pgtype.PolygonOID:
		c := map[uint32]conv{pgtype.BoxOID: cvBox, pgtype.LsegOID: cvLseg, pgtype.PathOID: cvPath, pgtype.PolygonOID: cvPolygon}[oid]
		return &node{conv: c, typ: "struct", name: "io.debezium.data.geometry.Geometry", version: 2, fields: geometryFields, label: typeLabel(oid)}, true
	case pgtype.CircleOID:
		return &node{conv: cvCircle, typ: "struct", name: "io.debezium.data.geometry.Circle", version: 1, fields: circleFields, label: "circle"}, true
	case pgtype.LineOID:
		return &node{conv: cvLine, typ: "struct", name: "io.debezium.data.geometry.Line", version: 1, fields: lineFields, label: "line"}, true
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID, pgtype.QCharOID,
		pgtype.InetOID, pgtype.CIDROID, pgtype.MacaddrOID, pgtype.Macaddr8OID, tsqueryOID,
		pgtype.Int4rangeOID, pgtype.Int8rangeOID, pgtype.NumrangeOID, pgtype.TsrangeOID, pgtype.TstzrangeOID, pgtype.DaterangeOID,
		pgtype.Int4multirangeOID, pgtype.Int8multirangeOID, pgtype.NummultirangeOID, pgtype.TsmultirangeOID,
		pgtype.TstzmultirangeOID, pgtype.DatemultirangeOID,
		pgtype.TIDOID, pgtype.XIDOID, pgtype.CIDOID, pgtype.XID8OID, pgtype.JSONPathOID, pgtype.ACLItemOID,
		22 /* int2vector */, 30 /* oidvector */, 24 /* regproc */, 2202, 2203, 2204, 2205, 2206, 3734, 3769, 4089, 4096, /* reg* */
		3220 /* pg_lsn */, 5038 /* pg_snapshot */, 2970 /* txid_snapshot */, 194 /* pg_node_tree */ :
		return str(""), true
	}
	return nil, false
}

func typeLabel(oid uint32) string {
	if t, ok := defaultTypeMap.TypeForOID(oid); ok {
		return t.Name
	}
	switch oid {
	case moneyOID:
		return "money"
	case tsqueryOID:
		return "tsquery"
	}
	return fmt.Sprintf("type %d", oid)
}

// withMod applies a typmod to a scalar node.
func withMod(n *node, oid uint32, mod int32) *node {
	switch oid {
	case pgtype.NumericOID:
		if mod >= 4 {
			prec := ((mod - 4) >> 16) & 0xffff
			scale := int32(int16(((mod-4)&0x7ff)<<5) >> 5) // 11-bit signed (PostgreSQL 15 allows negative scales)
			return &node{conv: cvDecimal, typ: "bytes", name: "org.apache.kafka.connect.data.Decimal", version: 1,
				params: [][2]string{{"scale", strconv.Itoa(int(scale))}, {"connect.decimal.precision", strconv.Itoa(int(prec))}},
				scale:  scale, label: "numeric"}
		}
	case pgtype.BitOID, pgtype.VarbitOID:
		length := int32(2147483647) // Debezium's length of an unconstrained varbit
		if mod > 0 {
			length = mod
		} else if oid == pgtype.BitOID {
			length = 1
		}
		if length == 1 {
			return &node{conv: cvBit1, typ: "boolean", label: n.label}
		}
		c := *n
		c.params = [][2]string{{"length", strconv.Itoa(int(length))}}
		return &c
	case pgtype.TimeOID:
		if mod >= 0 && mod <= 3 {
			return &node{conv: cvTimeMilli, typ: "int32", name: "io.debezium.time.Time", version: 1, label: "time"}
		}
	case pgtype.TimestampOID:
		if mod >= 0 && mod <= 3 {
			return &node{conv: cvTimestampMilli, typ: "int64", name: "io.debezium.time.Timestamp", version: 1, label: "timestamp"}
		}
	}
	return n
}

// maxTypeDepth bounds how deeply types may refer to one another (domains over arrays of
// composites of ...).
const maxTypeDepth = 16

// BuildNode returns the node of type oid with typmod mod.
func buildNode(types *format.Types, oid uint32, mod int32, depth int) (*node, error) {
	if depth > maxTypeDepth {
		return nil, fmt.Errorf("type %d: types refer to one another more than %d levels deep", oid, maxTypeDepth)
	}
	if n, ok := scalarOf(oid); ok {
		return withMod(n, oid, mod), nil
	}
	if e, ok := builtinArrayElem(oid); ok && StaticType(e) {
		elem, err := buildNode(types, e, mod, depth+1)
		if err != nil {
			return nil, err
		}
		return &node{conv: cvArray, typ: "array", elem: elem, label: typeLabel(oid)}, nil
	}
	ti := types.Get(oid)
	if ti == nil {
		return nil, fmt.Errorf("type %d is not in the type catalog (resolve the table's types first)", oid)
	}
	label := ti.Schema + "." + ti.Name
	switch {
	case ti.IsArray():
		elem, err := buildNode(types, ti.Elem, mod, depth+1)
		if err != nil {
			return nil, err
		}
		return &node{conv: cvArray, typ: "array", elem: elem, label: label}, nil
	case ti.Type == 'd':
		m := mod
		if ti.BaseMod >= 0 {
			m = ti.BaseMod
		}
		return buildNode(types, ti.Base, m, depth+1)
	case ti.Type == 'e':
		return &node{conv: cvString, typ: "string", name: "io.debezium.data.Enum", version: 1,
			params: [][2]string{{"allowed", strings.Join(ti.Labels, ",")}}, label: label}, nil
	case ti.Type == 'c':
		n := &node{conv: cvStruct, typ: "struct", name: label, label: label} // named <schema>.<type>
		for _, f := range ti.Fields {
			fn, err := buildNode(types, f.TypeOID, f.TypeMod, depth+1)
			if err != nil {
				return nil, fmt.Errorf("attribute %q of %s: %w", f.Name, label, err)
			}
			n.members = append(n.members, member{name: append(pgjson.AppendString(nil, []byte(f.Name)), ':'), n: fn})
		}
		return n, nil
	}
	if ti.Type == 'b' {
		// Extension types Debezium names (hstore.handling.mode=json).
		switch ti.Name {
		case "hstore":
			return &node{conv: cvHstore, typ: "string", name: "io.debezium.data.Json", version: 1, label: label}, nil
		case "ltree":
			return &node{conv: cvString, typ: "string", name: "io.debezium.data.Ltree", version: 1, label: label}, nil
		}
	}
	// Ranges, multiranges, other user base types (citext, ...) and pseudo-types: their text
	// rendering.
	return &node{conv: cvString, typ: "string", label: label}, nil
}

// AppendSchema appends n's Connect schema as JsonConverter writes it, with field set when the
// schema is a struct field.
func appendSchema(dst []byte, n *node, optional bool, field string) []byte {
	dst = append(dst, `{"type":"`...)
	dst = append(dst, n.typ...)
	dst = append(dst, '"')
	switch {
	case n.conv == cvArray:
		dst = append(dst, `,"items":`...)
		dst = appendSchema(dst, n.elem, true, "")
	case n.conv == cvStruct:
		dst = append(dst, `,"fields":[`...)
		for i, m := range n.members {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendSchema(dst, m.n, true, string(m.name[1:len(m.name)-2]))
		}
		dst = append(dst, ']')
	case n.fields != "":
		dst = append(dst, `,"fields":`...)
		dst = append(dst, n.fields...)
	}
	dst = append(dst, `,"optional":`...)
	dst = strconv.AppendBool(dst, optional)
	if n.name != "" {
		dst = append(dst, `,"name":`...)
		dst = pgjson.AppendString(dst, []byte(n.name))
		if n.version > 0 {
			dst = append(dst, `,"version":`...)
			dst = strconv.AppendInt(dst, int64(n.version), 10)
		}
	}
	if len(n.params) > 0 {
		dst = append(dst, `,"parameters":{`...)
		for i, p := range n.params {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = pgjson.AppendString(dst, []byte(p[0]))
			dst = append(dst, ':')
			dst = pgjson.AppendString(dst, []byte(p[1]))
		}
		dst = append(dst, '}')
	}
	if field != "" {
		dst = append(dst, `,"field":`...)
		dst = pgjson.AppendString(dst, []byte(field))
	}
	return append(dst, '}')
}

// converter holds the reusable buffers of json-with-schema value conversion.
type converter struct {
	scratch []byte // array element unescaping
	num     []byte // decimal digits
	wkb     []byte
	floats  []float64
	// elem is the element node of the flat array being written (AppendElement).
	elem *node
	// shape is set by a top-level array value whose shape is not one dimension with lower bound 1:
	// PostgreSQL's dimension decoration, e.g. "[0:2]" or "[1:2][1:3]".
	shape []byte
}

// AppendConnect appends the payload of text (nil: null) as node n.
func (c *converter) appendConnect(dst []byte, n *node, text []byte, top bool) ([]byte, error) {
	if text == nil {
		return append(dst, "null"...), nil
	}
	var err error
	out := dst
	switch n.conv {
	case cvString:
		return pgjson.AppendString(dst, text), nil
	case cvBool:
		return pgjson.AppendKind(dst, pgjson.KindBool, pgtype.BoolOID, text, nil)
	case cvInt:
		if !pgjson.IsJSONInt(text) {
			return dst, fmt.Errorf("encode %s: %q is not an integer", n.label, text)
		}
		return append(dst, text...), nil
	case cvFloat:
		if !pgjson.IsJSONNumber(text) {
			return dst, fmt.Errorf("encode %s %s: %w (JsonConverter reads no NaN or infinity; use CDC_VALUE_FORMAT=json)", n.label, text, errNotRepresentable)
		}
		return append(dst, text...), nil
	case cvDecimal, cvMoney:
		out, err = c.appendDecimal(dst, n, text)
	case cvVarDecimal:
		out, err = c.appendVarDecimal(dst, text)
	case cvBytea:
		return pgjson.AppendBytea(dst, text)
	case cvBit1:
		switch string(text) {
		case "1":
			return append(dst, "true"...), nil
		case "0":
			return append(dst, "false"...), nil
		}
		return dst, fmt.Errorf("encode %s: %q is not one bit", n.label, text)
	case cvBits:
		out, err = appendBits(dst, text)
	case cvDate:
		out, err = appendDate(dst, text)
	case cvTimeMilli, cvTimeMicro:
		out, err = appendTime(dst, text, n.conv == cvTimeMilli)
	case cvTimestampMilli, cvTimestampMicro:
		out, err = appendEpochTimestamp(dst, text, n.conv == cvTimestampMilli)
	case cvZonedTimestamp:
		out, err = appendZonedTimestamp(dst, text)
	case cvZonedTime:
		out, err = appendZonedTime(dst, text)
	case cvInterval:
		out, err = appendMicroDuration(dst, text)
	case cvJSON:
		t := trimSpace(text)
		if _, err := pgjson.AppendKind(nil, pgjson.KindJSON, pgtype.JSONOID, t, nil); err != nil {
			return dst, err
		}
		return pgjson.AppendString(dst, t), nil
	case cvPoint, cvLine, cvCircle, cvBox, cvLseg, cvPath, cvPolygon:
		out, err = c.appendGeometric(dst, n.conv, text)
	case cvArray:
		out, err = c.appendFlatArray(dst, n, text, top)
	case cvStruct:
		out, err = c.appendComposite(dst, n, text)
	case cvHstore:
		out, err = c.appendHstore(dst, text)
	default:
		return dst, fmt.Errorf("encode %s: no conversion", n.label)
	}
	if err != nil {
		return dst, fmt.Errorf("encode %s: %w", n.label, err)
	}
	return out, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && pgjson.IsArraySpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && pgjson.IsArraySpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// defaultTypeMap knows pgx's built-in types; it is read-only after init.
var defaultTypeMap = pgtype.NewMap()

// builtinArrayElem returns the element type of a built-in array type pgx knows.
func builtinArrayElem(oid uint32) (uint32, bool) {
	if e, ok := pgjson.ArrayElem(oid); ok {
		return e, true
	}
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

// StaticType reports whether oid needs no catalog entry: a built-in scalar with a static
// mapping, or a built-in array of one.
func StaticType(oid uint32) bool {
	if _, ok := scalarOf(oid); ok {
		return true
	}
	if e, ok := builtinArrayElem(oid); ok {
		return StaticType(e)
	}
	return false
}

// errNotRepresentable is format.ErrNotRepresentable, worded for this format.
var errNotRepresentable error = notRepresentable{}

type notRepresentable struct{}

func (notRepresentable) Error() string        { return "value cannot be represented in json-with-schema" }
func (notRepresentable) Is(target error) bool { return target == format.ErrNotRepresentable }
