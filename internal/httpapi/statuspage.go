package httpapi

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/tidemark/cdc/pkg/watermark"
)

// GET /status answers one page of exports, however many there are: the page asks for the rows
// it shows, filtered and sorted here, with the totals it shows beside them.
const (
	// statusDefaultLimit is the page of a GET /status that names no limit; statusMaxLimit
	// bounds the one it names. At 10,000 tables a full answer weighed 2.6 MB.
	statusDefaultLimit = 100
	statusMaxLimit     = 1000
)

// statusQuery selects GET /status's rows: those whose name, state or phase contains filter
// (case-insensitively), problems first when asked (statusRank), sorted by sort (asc or desc;
// equal keys by name), then limit of them from offset.
type statusQuery struct {
	offset, limit int
	filter        string
	sort          string
	desc          bool
	problems      bool
}

// statusSorts are the keys the rows can be sorted by (the page's columns).
var statusSorts = map[string]func(exportStatus) float64{
	"watermark":   func(x exportStatus) float64 { return lsnKey(x) },
	"lag_bytes":   func(x exportStatus) float64 { return optKey(x.LagBytes) },
	"lag_seconds": func(x exportStatus) float64 { return optKey(x.LagSeconds) },
	"progress": func(x exportStatus) float64 {
		if p, ok := statusProgress(x); ok {
			return float64(p)
		}
		return -1
	},
}

// parseStatusQuery reads ?offset=&limit=&filter=&sort=&dir=&problems=; every parameter is
// optional (the default: the first statusDefaultLimit rows by name, no problems first).
func parseStatusQuery(q url.Values) (statusQuery, error) {
	sq := statusQuery{limit: statusDefaultLimit, filter: strings.ToLower(q.Get("filter")), sort: cmp.Or(q.Get("sort"), "name")}
	var errs []error
	num := func(name string, dst *int, hi int) {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > hi {
				errs = append(errs, fmt.Errorf("%s=%q: want a whole number from 0 to %d", name, v, hi))
				return
			}
			*dst = n
		}
	}
	num("offset", &sq.offset, 1<<30)
	num("limit", &sq.limit, statusMaxLimit)
	if _, ok := statusSorts[sq.sort]; !ok && sq.sort != "name" && sq.sort != "state" {
		errs = append(errs, fmt.Errorf("sort=%q: want name, state, watermark, lag_bytes, lag_seconds or progress", sq.sort))
	}
	switch q.Get("dir") {
	case "", "asc", "1":
	case "desc", "-1":
		sq.desc = true
	default:
		errs = append(errs, fmt.Errorf("dir=%q: want asc or desc", q.Get("dir")))
	}
	switch q.Get("problems") {
	case "", "0", "false":
	case "1", "true":
		sq.problems = true
	default:
		errs = append(errs, fmt.Errorf("problems=%q: want true or false", q.Get("problems")))
	}
	return sq, errors.Join(errs...)
}

// page counts rows by state, and returns those sq selects and how many matched its filter.
func (sq statusQuery) page(rows []exportStatus) (page []exportStatus, matched int, counts map[watermark.State]int) {
	counts = make(map[watermark.State]int)
	list := rows[:0:0]
	for _, x := range rows {
		counts[x.State]++
		if sq.filter == "" || strings.Contains(strings.ToLower(x.Export.String()+" "+string(x.State)+" "+x.Phase), sq.filter) {
			list = append(list, x)
		}
	}
	slices.SortStableFunc(list, sq.compare)
	from := min(sq.offset, len(list))
	return list[from:min(from+sq.limit, len(list))], len(list), counts
}

// compare orders two rows as sq asks.
func (sq statusQuery) compare(a, b exportStatus) int {
	if sq.problems {
		if c := cmp.Compare(statusRank(a), statusRank(b)); c != 0 {
			return c
		}
	}
	var c int
	switch sq.sort {
	case "name":
	case "state":
		c = strings.Compare(string(a.State)+" "+a.Phase, string(b.State)+" "+b.Phase)
	default:
		key := statusSorts[sq.sort]
		c = cmp.Compare(key(a), key(b))
	}
	if c == 0 {
		c = strings.Compare(a.Export.String(), b.Export.String())
		if sq.sort != "name" {
			return c // equal keys: by name, ascending whatever the direction
		}
	}
	if sq.desc {
		return -c
	}
	return c
}

// statusRank puts problems first: failed, then stuck (a copy that made no progress, a lag over
// a minute), then copying, hydrated, the rest.
func statusRank(x exportStatus) int {
	switch {
	case x.State == watermark.StateFailed:
		return 0
	case x.State == watermark.StateHydrating && x.RowsPerSecond != nil && *x.RowsPerSecond == 0,
		x.LagSeconds != nil && *x.LagSeconds > 60:
		return 1
	case x.State == watermark.StateHydrating:
		return 2
	case x.State == watermark.StateHydrated:
		return 3
	}
	return 4
}

// statusProgress is a copy's progress in percent: rows over the estimate while copying (at most
// 99), 100 once hydrated after a copy; false when there is no copy to show.
func statusProgress(x exportStatus) (int, bool) {
	switch {
	case x.State == watermark.StateHydrated && (x.Rows > 0 || x.Estimated > 0):
		return 100, true
	case x.State != watermark.StateHydrating:
		return 0, false
	case x.Estimated == 0:
		return 0, true
	}
	return int(min(99, 100*x.Rows/x.Estimated)), true
}

func lsnKey(x exportStatus) float64 {
	if x.Watermark == nil {
		return -1
	}
	return float64(*x.Watermark)
}

func optKey[T int64 | float64](p *T) float64 {
	if p == nil {
		return -1
	}
	return float64(*p)
}
