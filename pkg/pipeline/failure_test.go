package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// TestFailureClass: the class of an export's error names its kind and never quotes the row
// value that the error text holds.
func TestFailureClass(t *testing.T) {
	const value = "(31337.777,NaN)"
	export := change.ExportID{Schema: "public", Table: "t"}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"not representable", fmt.Errorf("encode change of public.t at 0/1: %w", &codec.ValueError{Column: "p", Export: export,
			Err: fmt.Errorf("%s: coordinate %q: %w", value, "NaN", codec.ErrNotRepresentable)}), "a value cannot be represented in json-with-schema"},
		{"value", fmt.Errorf("snapshot: %w", &codec.ValueError{Column: "n", Export: export, Err: fmt.Errorf("%q is not a number", value)}),
			"a value cannot be encoded"},
		{"too large", fmt.Errorf("change of public.t: %w: 2000000 bytes", codec.ErrRecordTooLarge), "a change's record is larger than the record size limit"},
		{"postgres", fmt.Errorf("snapshot public.t: %w", &pgconn.PgError{Code: "22P02", Message: "invalid input syntax: " + value}),
			"PostgreSQL error SQLSTATE 22P02"},
		{"other", errors.New("public.t lost its key " + value), FailureUnknown},
		{"none (restored)", nil, FailureUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := failureClass(tc.err)
			if got != tc.want || strings.Contains(got, "31337") {
				t.Errorf("failureClass(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
	s := ExportState{Export: export, Error: "encode column: " + value, ErrorClass: "a value cannot be encoded"}
	if r := s.RedactError("need the token"); r.Error != "a value cannot be encoded (need the token)" || s.Error == r.Error {
		t.Errorf("RedactError: %q (original %q)", r.Error, s.Error)
	}
	if r := (ExportState{Export: export}).RedactError("x"); r.Error != "" {
		t.Errorf("RedactError of a fine export: %q", r.Error)
	}
}
