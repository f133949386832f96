package avro

import (
	"encoding/json"
	"fmt"
	"strings"
)

// snode is one type of a writer schema read back from the registry: what the decoder needs to
// walk a datum and to write its values as JSON.
type snode struct {
	typ     string // null, boolean, int, long, float, double, bytes, string, record, enum, array, map, fixed, union
	logical string // logicalType
	connect string // connect.name
	// connectType is connect.type: "int16" for int2's int.
	connectType string
	pgType      string // tidemark.type: "bit" for bit(1)'s boolean
	name        string // a named type's full name
	scale       int
	length      int // io.debezium.data.Bits' length parameter; fixed's size
	fields      []sfield
	items       *snode // array items, map values
	branches    []*snode
	symbols     []string
}

type sfield struct {
	name   string // the column's name (tidemark.column when the Avro name differs)
	typ    *snode
	column string
}

// parseSchema reads an Avro schema's JSON text.
func parseSchema(text string) (*snode, error) {
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	p := &schemaParser{named: map[string]*snode{}}
	return p.parse(v, "", 0)
}

type schemaParser struct {
	named map[string]*snode
}

func fullName(name, ns string) string {
	if strings.Contains(name, ".") || ns == "" {
		return name
	}
	return ns + "." + name
}

func (p *schemaParser) parse(v any, ns string, depth int) (*snode, error) {
	if depth > 64 {
		return nil, fmt.Errorf("parse schema: nested too deep")
	}
	switch t := v.(type) {
	case string:
		switch t {
		case "null", "boolean", "int", "long", "float", "double", "bytes", "string":
			return &snode{typ: t}, nil
		}
		for _, name := range []string{fullName(t, ns), t} {
			if n, ok := p.named[name]; ok {
				return n, nil
			}
		}
		return nil, fmt.Errorf("parse schema: unknown type %q", t)
	case []any:
		u := &snode{typ: "union"}
		for _, b := range t {
			n, err := p.parse(b, ns, depth+1)
			if err != nil {
				return nil, err
			}
			u.branches = append(u.branches, n)
		}
		return u, nil
	case map[string]any:
		typ, _ := t["type"].(string)
		n := &snode{typ: typ}
		n.logical, _ = t["logicalType"].(string)
		n.connect, _ = t["connect.name"].(string)
		n.connectType, _ = t["connect.type"].(string)
		n.pgType, _ = t["tidemark.type"].(string)
		if s, ok := t["scale"].(float64); ok {
			n.scale = int(s)
		}
		if params, ok := t["connect.parameters"].(map[string]any); ok {
			if l, ok := params["length"].(string); ok {
				fmt.Sscan(l, &n.length)
			}
		}
		switch typ {
		case "record", "error", "enum", "fixed":
			name, _ := t["name"].(string)
			if nsv, ok := t["namespace"].(string); ok && !strings.Contains(name, ".") {
				ns = nsv
			}
			n.name = fullName(name, ns)
			if i := strings.LastIndexByte(n.name, '.'); i >= 0 {
				ns = n.name[:i]
			}
			p.named[n.name] = n
		}
		switch typ {
		case "record", "error":
			n.typ = "record"
			fields, _ := t["fields"].([]any)
			for _, f := range fields {
				fm, _ := f.(map[string]any)
				name, _ := fm["name"].(string)
				ft, err := p.parse(fm["type"], ns, depth+1)
				if err != nil {
					return nil, err
				}
				sf := sfield{name: name, typ: ft}
				if col, ok := fm["tidemark.column"].(string); ok {
					sf.column = col
				}
				n.fields = append(n.fields, sf)
			}
		case "enum":
			for _, s := range t["symbols"].([]any) {
				str, _ := s.(string)
				n.symbols = append(n.symbols, str)
			}
		case "fixed":
			if s, ok := t["size"].(float64); ok {
				n.length = int(s)
			}
		case "array":
			it, err := p.parse(t["items"], ns, depth+1)
			if err != nil {
				return nil, err
			}
			n.items = it
		case "map":
			it, err := p.parse(t["values"], ns, depth+1)
			if err != nil {
				return nil, err
			}
			n.items = it
		case "null", "boolean", "int", "long", "float", "double", "bytes", "string":
		default:
			// {"type": <a named type>} or {"type": {...}}
			inner, err := p.parse(t["type"], ns, depth+1)
			if err != nil {
				return nil, err
			}
			return inner, nil
		}
		return n, nil
	}
	return nil, fmt.Errorf("parse schema: unexpected %T", v)
}
