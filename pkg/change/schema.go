package change

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// Column is one column of a published table, as both stages see it: from pg_attribute under the
// snapshot, or from a pgoutput Relation message.
type Column struct {
	Name    string
	TypeOID uint32
	// TypeMod is the atttypmod (-1 when none).
	TypeMod int32
	// Key is true for the replica identity columns (primary key or replica identity index) that
	// make up the Kafka record key.
	Key bool
}

// Table is the schema of one export at some point in time.
type Table struct {
	Export  ExportID
	OID     uint32
	Columns []Column
	// Published is the publication's column list and row filter: Columns holds only the
	// listed columns, and a copy reads only the rows the filter lets through.
	Published PublishedAs
}

// KeyColumns returns the indexes of the key columns; empty for a keyless table.
func (t *Table) KeyColumns() []int {
	var idx []int
	for i, c := range t.Columns {
		if c.Key {
			idx = append(idx, i)
		}
	}
	return idx
}

// PublishedAs is how a publication publishes a table: its column list and row filter
// (PostgreSQL 15). The zero value publishes every column and every row.
type PublishedAs struct {
	// Columns are the attnums of the column list in attnum order; nil publishes every column.
	Columns []int16
	// Names are the column list's names now, for messages.
	Names []string
	// RowFilter is the row filter as pg_get_expr renders it, ready for a WHERE clause; ""
	// publishes every row.
	RowFilter string
	// FilterTree is the filter's stored node tree. It names columns by number, so a column
	// renamed leaves it alone while any change to the expression changes it.
	FilterTree string
}

// Digest identifies what p publishes: the column list's attnums and the filter's node tree, so
// a column renamed leaves it alone. It is "" for every column and row.
func (p PublishedAs) Digest() string {
	if p.Columns == nil && p.FilterTree == "" {
		return ""
	}
	h := sha256.New()
	if p.Columns != nil {
		for _, c := range p.Columns {
			fmt.Fprintf(h, "%d,", c)
		}
	} else {
		h.Write([]byte("*"))
	}
	h.Write([]byte{0})
	// Token positions in the statement that set the filter are no part of it: the same filter
	// set again by another statement (ALTER PUBLICATION ... SET TABLE) must digest the same.
	h.Write([]byte(nodeLocation.ReplaceAllString(p.FilterTree, "")))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// nodeLocation matches the source positions in a stored node tree (pg_node_tree's text form;
// constants are stored as bytes there, so no value can look like one).
var nodeLocation = regexp.MustCompile(` :location -?[0-9]+`)

// String describes p for a log line.
func (p PublishedAs) String() string {
	cols := "every column"
	if p.Columns != nil {
		cols = "columns (" + strings.Join(p.Names, ", ") + ")"
	}
	rows := "every row"
	if p.RowFilter != "" {
		rows = "rows WHERE " + p.RowFilter
	}
	return cols + ", " + rows
}
