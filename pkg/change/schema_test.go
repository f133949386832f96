package change

import "testing"

func TestPublishedAsDigest(t *testing.T) {
	const tree = `{OPEXPR :opno 98 :args ({VAR :varno 1 :varattno 3 :location 75} {CONST :constvalue 6 [ 24 0 0 0 101 117 ]}) :location 82}`
	base := PublishedAs{Columns: []int16{1, 2, 3}, Names: []string{"id", "name", "region"}, RowFilter: "(region = 'eu'::text)", FilterTree: tree}
	moved := base
	moved.FilterTree = `{OPEXPR :opno 98 :args ({VAR :varno 1 :varattno 3 :location 120} {CONST :constvalue 6 [ 24 0 0 0 101 117 ]}) :location 127}`
	renamed := base
	renamed.Names, renamed.RowFilter = []string{"id", "full_name", "area"}, "(area = 'eu'::text)"
	otherValue := base
	otherValue.FilterTree = `{OPEXPR :opno 98 :args ({VAR :varno 1 :varattno 3 :location 75} {CONST :constvalue 6 [ 24 0 0 0 117 115 ]}) :location 82}`
	wider := base
	wider.Columns = []int16{1, 2, 3, 4}
	noList := base
	noList.Columns = nil
	emptyList := base
	emptyList.Columns = []int16{}

	if d := (PublishedAs{}).Digest(); d != "" {
		t.Errorf("every column and row: digest %q, want empty", d)
	}
	tests := []struct {
		name string
		p    PublishedAs
		same bool
	}{
		{"filter set again by another statement", moved, true},
		{"columns renamed", renamed, true},
		{"another constant", otherValue, false},
		{"a column added", wider, false},
		{"list dropped", noList, false},
		{"empty list is not every column", emptyList, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Digest() == base.Digest(); got != tt.same {
				t.Errorf("same digest = %v, want %v", got, tt.same)
			}
		})
	}
}
