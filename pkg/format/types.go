package format

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tidemark/cdc/pkg/change"
)

// TypeInfo is what a format may need to know about a type that is not built in (or a built-in
// type the format has no static entry for): one row of pg_type with its enum
// labels, composite attributes and range subtype.
type TypeInfo struct {
	OID      uint32
	Schema   string // pg_namespace.nspname
	Name     string // pg_type.typname
	Type     byte   // typtype: b base, c composite, d domain, e enum, r range, m multirange, p pseudo
	Category byte   // typcategory ('A' for arrays)
	Elem     uint32 // typelem of an array type (0 otherwise)
	Base     uint32 // a domain's typbasetype
	BaseMod  int32  // a domain's typtypmod (-1 when none)
	Labels   []string
	Fields   []change.Column // a composite's attributes, in attnum order (Key unused)
	Subtype  uint32          // a range's subtype; a multirange's range type
}

// IsArray reports whether ti describes an array type (of a known element).
func (ti *TypeInfo) IsArray() bool { return ti.Category == 'A' && ti.Elem != 0 && ti.Type == 'b' }

// ErrTypeNotFound is wrapped when a column's type is not in pg_type (dropped since the table's
// schema was read): permanent for that export.
var ErrTypeNotFound = errors.New("type does not exist")

// LoadTypesFunc reads the pg_type rows of oids (pgcat.QueryTypes does it on a connection).
type LoadTypesFunc func(ctx context.Context, oids []uint32) ([]TypeInfo, error)

// Types is the catalog of the types that a format cannot know statically (json-with-schema does):
// user-defined types (domains, enums, composites, ranges, arrays of them) and the few built-in
// types without a static entry. Each OID is read once, with everything it refers to (a domain's
// base type, an array's element type, a composite's attribute types), and kept for the life of the
// process. One Types is shared by every stage, so the snapshot and the stream build identical
// encoders. It is safe for concurrent use.
//
// A type changed while the process runs (ALTER TYPE ... ADD VALUE, ALTER TYPE ... ADD ATTRIBUTE)
// keeps the description read first until the process restarts.
type Types struct {
	load LoadTypesFunc

	mu sync.RWMutex
	m  map[uint32]*TypeInfo
}

// NewTypes returns an empty catalog that reads missing types with load.
func NewTypes(load LoadTypesFunc) *Types {
	return &Types{load: load, m: make(map[uint32]*TypeInfo)}
}

// Add puts descriptions into the catalog (for tests and for callers that already read them). A
// type already described keeps its first description, so two stages that resolved it at the same
// moment still build the same encoders.
func (t *Types) Add(infos ...TypeInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range infos {
		ti := infos[i]
		if _, ok := t.m[ti.OID]; !ok {
			t.m[ti.OID] = &ti
		}
	}
}

// Get returns the description of oid, or nil when the catalog has none.
func (t *Types) Get(oid uint32) *TypeInfo {
	if t == nil {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.m[oid]
}

// ResolveTable makes sure every column type of tbl, and every type those refer to, is known,
// except those static reports the format knows without the catalog.
func (t *Types) ResolveTable(ctx context.Context, tbl *change.Table, static func(oid uint32) bool) error {
	oids := make([]uint32, 0, len(tbl.Columns))
	for _, c := range tbl.Columns {
		oids = append(oids, c.TypeOID)
	}
	if err := t.Resolve(ctx, oids, static); err != nil {
		return fmt.Errorf("types of %s: %w", tbl.Export, err)
	}
	return nil
}

// Resolve reads the types among oids (and those they refer to) that are neither static (the
// format knows them without the catalog) nor in the catalog yet.
func (t *Types) Resolve(ctx context.Context, oids []uint32, static func(oid uint32) bool) error {
	for depth := 0; len(oids) > 0; depth++ {
		if depth > 32 {
			return fmt.Errorf("resolve types: type references nest too deep")
		}
		var missing []uint32
		seen := map[uint32]bool{}
		for _, oid := range oids {
			if oid == 0 || seen[oid] || static(oid) || t.Get(oid) != nil {
				continue
			}
			seen[oid] = true
			missing = append(missing, oid)
		}
		if len(missing) == 0 {
			return nil
		}
		if t.load == nil {
			return fmt.Errorf("resolve types: type %d is unknown and there is no catalog to read it from", missing[0])
		}
		infos, err := t.load(ctx, missing)
		if err != nil {
			return fmt.Errorf("resolve types %v: %w", missing, err)
		}
		got := map[uint32]bool{}
		oids = oids[:0:0]
		for _, ti := range infos {
			got[ti.OID] = true
			oids = append(oids, ti.Elem, ti.Base, ti.Subtype)
			for _, f := range ti.Fields {
				oids = append(oids, f.TypeOID)
			}
		}
		for _, oid := range missing {
			if !got[oid] {
				return fmt.Errorf("resolve types: type %d: %w", oid, ErrTypeNotFound)
			}
		}
		t.Add(infos...)
	}
	return nil
}
