package pipeline

import (
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// copyDurable is called when e's copy is durable. When earlier attempts left rows in its topic
// it queues a reconcile (snapshot.Reconciler), after which the replication stage may release
// e's hold buffer (evReconciled), and returns true; otherwise the caller releases it at once.
func (o *owner) copyDurable(e change.ExportID) bool {
	r, ok := o.tracker.ReconcileRange(e)
	if !ok || !r.Needed() {
		return false
	}
	o.reconcileQ = append(o.reconcileQ, snapshot.ReconcileJob{Export: e, Topic: r.Topic, Attempt: r.Attempt, C: r.C,
		From: r.From, Until: r.Until, Written: o.topics.EndOffsets(r.Topic)})
	return true
}
