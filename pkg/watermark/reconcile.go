package watermark

import (
	"maps"

	"github.com/tidemark/cdc/pkg/change"
)

// Reconcile describes what must be reconciled before a hydrating export may be hydrated: the
// rows its topic received from earlier, unfinished attempts (or before a removal) between From
// and Until, that the current attempt's snapshot may not contain.
type Reconcile struct {
	Topic   string
	Attempt int
	C       change.LSN
	// From: per partition, where earlier attempts' rows start (absent: the beginning).
	From map[int32]int64
	// Until: per partition, where the current attempt's rows start.
	Until map[int32]int64
}

// Needed reports whether any partition has rows of earlier attempts to look at.
func (r Reconcile) Needed() bool {
	for p, until := range r.Until {
		if until > r.From[p] {
			return true
		}
	}
	return false
}

// ReconcileRange returns e's reconcile range while e is hydrating.
func (t *Tracker) ReconcileRange(e change.ExportID) (Reconcile, bool) {
	x := t.hydrating(e)
	if x == nil || x.snap == nil {
		return Reconcile{}, false
	}
	return Reconcile{
		Topic:   x.topic,
		Attempt: x.snap.Attempt,
		C:       x.snap.ConsistentPoint,
		From:    maps.Clone(x.snap.ReconcileFrom),
		Until:   maps.Clone(x.snap.StartOffsets),
	}, true
}
