package pipeline

import (
	"cmp"
	"slices"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

func sortedExports[V any](m map[change.ExportID]V) []change.ExportID {
	out := make([]change.ExportID, 0, len(m))
	for e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, compareExport)
	return out
}

func compareExport(a, b change.ExportID) int {
	if a.Schema != b.Schema {
		if a.Schema < b.Schema {
			return -1
		}
		return 1
	}
	switch {
	case a.Table < b.Table:
		return -1
	case a.Table > b.Table:
		return 1
	}
	return 0
}

// ExportState is one export as the pipeline sees it now (GET /exports).
type ExportState struct {
	Export change.ExportID `json:"export"`
	Topic  string          `json:"topic"`
	// Phase is where the export is in its life (chunking, copying, ...); State is what its
	// watermark records say in that phase (hydrating, hydrated, removed, failed), derived from
	// it. An export restored from the watermark topic and not published again has no phase:
	// its State is that of its last record.
	State watermark.State `json:"state"`
	Phase string          `json:"phase,omitempty"`
	// Watermark is the last watermark published (null: none yet); Position the own position.
	Watermark *change.LSN `json:"watermark"`
	Position  *change.LSN `json:"position"`
	Attempt   int         `json:"snapshot_attempt,omitempty"`
	Rows      int64       `json:"snapshot_rows_copied,omitempty"`
	Estimated int64       `json:"snapshot_rows_estimated,omitempty"`
	// Error is the text of the error that stopped the export; it can quote row values.
	// ErrorClass names its kind without quoting anything (see RedactError).
	Error      string `json:"error,omitempty"`
	ErrorClass string `json:"error_class,omitempty"`
}

// RedactError returns s with its error text replaced by its class and a note that the full text
// needs more privilege (need): for places that must not show row data.
func (s ExportState) RedactError(need string) ExportState {
	if s.Error != "" {
		s.Error = s.ErrorClass + " (" + need + ")"
	}
	return s
}

// states returns every export the tracker knows, sorted by name.
func (o *owner) states() []ExportState {
	status := o.tracker.Status()
	out := make([]ExportState, 0, len(status))
	for _, s := range status {
		st := ExportState{Export: s.Export, Topic: s.Topic, State: s.State, Attempt: s.Attempt,
			Rows: s.RowsCopied, Estimated: s.RowsEstimated, Error: s.Err}
		if s.Err != "" {
			st.ErrorClass = cmp.Or(o.failures[s.Export], FailureUnknown)
		}
		if p := o.phases[s.Export]; p != 0 {
			st.Phase = p.String() // s.State is p.state(): the tracker follows the phases
		}
		if s.HasWatermark {
			w := s.Watermark
			st.Watermark = &w
		}
		if s.HasPosition {
			p := s.Position
			st.Position = &p
		}
		out = append(out, st)
	}
	return out
}
