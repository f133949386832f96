package change

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
