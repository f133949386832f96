package httpapi

import (
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/secret"
	"github.com/tidemark/cdc/pkg/watermark"
)

// TestStatusPaged: GET /status answers the page asked for, filtered and sorted over every
// export, with the totals; 10,000 exports answer 100 rows by default.
func TestStatusPaged(t *testing.T) {
	var exports []pipeline.ExportState
	for i := range 10_000 {
		s := pipeline.ExportState{Export: change.ExportID{Schema: "public", Table: fmt.Sprintf("t%05d", i)}, State: watermark.StateHydrated}
		switch {
		case i == 7:
			s.State = watermark.StateFailed
		case i%1000 == 5:
			s.State, s.Estimated, s.Rows = watermark.StateHydrating, 100, int64(i/100)
		}
		exports = append(exports, s)
	}
	b := newTestBoard(fakeService{exports: exports})
	names := func(rows []exportStatus) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.Export.Table)
		}
		return out
	}
	for _, tc := range []struct {
		name, query string
		want        []string
		matched     int
	}{
		{"default", "", nil, 10_000},
		{"page", "offset=9998&limit=5", []string{"t09998", "t09999"}, 10_000},
		{"filter", "filter=HYDRATING&limit=3", []string{"t00005", "t01005", "t02005"}, 10},
		{"problems first", "problems=true&limit=3", []string{"t00007", "t00005", "t01005"}, 10_000},
		{"progress descending", "sort=progress&dir=desc&filter=hydrating&limit=2", []string{"t09005", "t08005"}, 10},
		{"past the end", "offset=20000", []string{}, 10_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.query)
			sq, err := parseStatusQuery(q)
			if err != nil {
				t.Fatal(err)
			}
			r := b.report(time.Now(), "v", false, secret.Token{}, sq)
			if r.Total != 10_000 || r.Matched != tc.matched || r.Counts[watermark.StateHydrating] != 10 || r.Counts[watermark.StateFailed] != 1 {
				t.Errorf("total %d, matched %d, counts %v; want 10000, %d, 10 hydrating and 1 failed", r.Total, r.Matched, r.Counts, tc.matched)
			}
			got := names(r.Exports)
			if tc.want == nil {
				if len(got) != statusDefaultLimit || got[0] != "t00000" {
					t.Errorf("default page: %d rows from %v; want %d from t00000", len(got), got[:min(1, len(got))], statusDefaultLimit)
				}
				return
			}
			if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("rows %v, want %v", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"limit=1001", "offset=-1", "sort=size", "dir=up", "problems=maybe", "limit=x"} {
		q, _ := url.ParseQuery(bad)
		if _, err := parseStatusQuery(q); err == nil {
			t.Errorf("%s accepted; want an error", bad)
		}
	}
}
