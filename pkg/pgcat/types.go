package pgcat

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// QueryTypes reads the pg_type rows of oids, with what the json-with-schema format needs of
// each (enum labels, composite attributes, range subtype): codec.Types loads through it.
func QueryTypes(ctx context.Context, q Querier, oids []uint32) ([]codec.TypeInfo, error) {
	rows, err := q.Query(ctx, `SELECT t.oid, n.nspname::text, t.typname::text, t.typtype::text,
		t.typcategory::text, t.typelem, t.typbasetype, t.typtypmod,
		COALESCE((SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
			FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid), '{}'),
		COALESCE((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
			WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped), '{}'),
		COALESCE((SELECT array_agg(a.atttypid ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
			WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped), '{}'),
		COALESCE((SELECT array_agg(a.atttypmod ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
			WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped), '{}'),
		COALESCE((SELECT r.rngsubtype FROM pg_catalog.pg_range r WHERE r.rngtypid = t.oid),
			(SELECT r.rngtypid FROM pg_catalog.pg_range r WHERE to_jsonb(r)->>'rngmultitypid' = t.oid::text),
			0)
		FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
		WHERE t.oid = ANY($1)`, oids)
	if err != nil {
		return nil, fmt.Errorf("read pg_type: %w", err)
	}
	var out []codec.TypeInfo
	var (
		ti       codec.TypeInfo
		typ, cat string
		names    []string
		attTypes []uint32
		attMods  []int32
		labels   []string
	)
	_, err = pgx.ForEachRow(rows, []any{&ti.OID, &ti.Schema, &ti.Name, &typ, &cat, &ti.Elem, &ti.Base, &ti.BaseMod,
		&labels, &names, &attTypes, &attMods, &ti.Subtype}, func() error {
		x := ti
		x.Type, x.Category = typ[0], cat[0]
		x.Labels = append([]string(nil), labels...)
		for i := range names {
			x.Fields = append(x.Fields, change.Column{Name: names[i], TypeOID: attTypes[i], TypeMod: attMods[i]})
		}
		out = append(out, x)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read pg_type: %w", err)
	}
	return out, nil
}
