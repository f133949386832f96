package codec

import (
	"github.com/tidemark/cdc/pkg/change"
)

// connectHeads returns the `{"schema":<envelope schema>,"payload":` and `{"schema":<key
// schema>,"payload":` prefixes of an export's values and keys in json-with-schema. The schemas
// depend only on the table, so they are built once per encoder; a record adds only its payload.
func connectHeads(topic string, t *change.Table, cols []column) (val, key []byte) {
	row := func(dst []byte, name string, keysOnly bool, optional bool, field string) []byte {
		dst = append(dst, `{"type":"struct","fields":[`...)
		first := true
		for i, c := range cols {
			if keysOnly && !t.Columns[i].Key {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = appendSchema(dst, c.node, !t.Columns[i].Key, t.Columns[i].Name)
		}
		dst = append(dst, `],"optional":`...)
		if optional {
			dst = append(dst, "true"...)
		} else {
			dst = append(dst, "false"...)
		}
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, []byte(name))
		if field != "" {
			dst = append(dst, `,"field":"`...)
			dst = append(dst, field...)
			dst = append(dst, '"')
		}
		return append(dst, '}')
	}
	v := []byte(`{"schema":{"type":"struct","fields":[`)
	v = row(v, topic+".Value", false, true, "before")
	v = append(v, ',')
	v = row(v, topic+".Value", false, true, "after")
	v = append(v, `,{"type":"struct","fields":[`+
		`{"type":"string","optional":false,"field":"version"},`+
		`{"type":"string","optional":false,"field":"connector"},`+
		`{"type":"string","optional":false,"field":"name"},`+
		`{"type":"string","optional":false,"field":"db"},`+
		`{"type":"string","optional":false,"field":"schema"},`+
		`{"type":"string","optional":false,"field":"table"},`+
		`{"type":"int64","optional":true,"field":"lsn"},`+
		`{"type":"string","optional":true,"field":"lsn_text"},`+
		`{"type":"int64","optional":true,"field":"txId"},`+
		`{"type":"int64","optional":true,"field":"sequence"},`+
		`{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,false"},"default":"false","field":"snapshot"},`+
		`{"type":"int32","optional":true,"field":"attempt"},`+
		`{"type":"int64","optional":false,"field":"ts_ms"}`+
		`],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},`+
		`{"type":"string","optional":false,"field":"op"},`+
		`{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":`...)
	v = appendString(v, []byte(topic+".Envelope"))
	v = append(v, `,"version":2},"payload":`...)
	k := []byte(`{"schema":`)
	k = row(k, topic+".Key", true, false, "")
	k = append(k, `,"payload":`...)
	return v, k
}

// appendConnectColumn appends the json-with-schema payload of column i of row.
func (e *Encoder) appendConnectColumn(dst []byte, i int, row [][]byte, unavail []bool) ([]byte, error) {
	c := &e.cols[i]
	if unavail != nil && unavail[i] {
		// The value is unknown (UnchangedPlaceholder; UnchangedOmit never gets here). The
		// placeholder string fits only a string column's schema; other columns get null, and the
		// HeaderUnchanged header names the column either way.
		if c.node.typ == "string" {
			return append(dst, e.placeholder...), nil
		}
		return append(dst, "null"...), nil
	}
	e.conv.shape = e.conv.shape[:0]
	out, err := e.conv.appendConnect(dst, c.node, row[i], true)
	if err != nil {
		return dst, &ValueError{Column: e.table.Columns[i].Name, Export: e.table.Export, Err: err}
	}
	if len(e.conv.shape) > 0 && e.section != "" {
		if len(e.dims) == 0 {
			e.dims = append(e.dims, '{')
		}
		if !e.dimsSec {
			if len(e.dims) > 1 {
				e.dims = append(e.dims, ',')
			}
			e.dims = append(e.dims, e.section...)
			e.dims = append(e.dims, ":{"...)
			e.dimsSec = true
		} else {
			e.dims = append(e.dims, ',')
		}
		e.dims = append(e.dims, c.name...)
		e.dims = appendString(e.dims, e.conv.shape)
	}
	return out, nil
}

// closeDims ends the HeaderArrayDims section of the row just encoded.
func (e *Encoder) closeDims() {
	if e.dimsSec {
		e.dims = append(e.dims, '}')
		e.dimsSec = false
	}
}
