package pipeline

import (
	"fmt"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/watermark"
)

// After a failover, what Kafka holds past the promotion point (the promoted server's switch
// point) is either the promoted server's own changes, published by a life on it, or changes of
// the old primary's WAL that the standby never received. The slot cannot tell them apart until
// a life on the promoted server confirms it past the switch point, and a crash can come first.
// So every checkpoint names the timeline its positions were read on (owner.origin), and the
// first transaction that makes a position past the switch point durable carries one: in
// exactly-once mode in the same Kafka transaction, so Kafka never holds a position past the
// promotion without a checkpoint that names the promoted server's timeline (or a later one).

// originOf is the checkpoints' name for timeline tl.
func originOf(tl replication.Timeline) watermark.Origin {
	return watermark.Origin{Timeline: tl.ID, PromotedAt: tl.SwitchPoint}
}

// checkOrigin refuses a server that is not on the timeline of Kafka's latest checkpoint nor on
// a later one: a server whose WAL after some point is not the one cdc published from (the old
// primary started again as a primary after a failover). A checkpoint that names no timeline
// (an older build's) says nothing.
func checkOrigin(cfg Config, tl replication.Timeline, cp *watermark.Checkpoint) error {
	if cp == nil || cp.Timeline == 0 {
		return nil
	}
	o, here := cp.Origin(), originOf(tl)
	if o.Timeline < here.Timeline || o == here {
		return nil
	}
	return fatal(fmt.Errorf("failover: Kafka's latest checkpoint (%s, in the watermark topic %s) was written on %s, and this server is on %s: "+
		"it is not the server cdc published from nor one promoted from it, and its WAL past the point where they part is another history "+
		"(after a failover, did the old primary start again as a primary? CDC_PG_URL must reach the promoted server). cdc does not guess and stops "+
		"(docs/production.md#failover)", cp.Position, cfg.Sink.WatermarkTopic, o, here))
}

// pastPromotion decides a start on promoted server tl whose slot (confirmed at slotLSN) is
// behind the switch point while Kafka holds export ahead up to kafka, past it. When Kafka's
// latest checkpoint names this timeline, what Kafka holds past the switch point is this
// server's own: the stream replays from the slot and skips it (nil). Otherwise it is refused,
// with the cause the checkpoint tells.
func pastPromotion(cfg Config, tl replication.Timeline, cp *watermark.Checkpoint, slotLSN change.LSN, ahead change.ExportID, kafka change.LSN) error {
	var o watermark.Origin
	if cp != nil {
		o = cp.Origin()
	}
	if o == originOf(tl) {
		cfg.Logger.Warn("failover: this server was promoted, and Kafka holds its own changes past the promotion (the checkpoint names this timeline) while its replication slot is behind: a life on it published them and ended before it confirmed the slot; the stream replays from the slot and skips what Kafka holds, nothing is copied again",
			"slot", cfg.Slot, "timeline", tl.ID, "promoted_at", tl.SwitchPoint.String(), "slot_lsn", slotLSN.String(), "kafka_lsn", kafka.String(), "export", ahead.String())
		return nil
	}
	head := fmt.Sprintf("failover: this server was promoted at %s (timeline %d), but Kafka holds table %s up to %s, past the promotion, and replication slot %q here is confirmed at %s",
		tl.SwitchPoint, tl.ID, ahead, kafka, cfg.Slot, slotLSN)
	restart := fmt.Sprintf("cdc does not guess and stops: delete the watermark topic %s (or use a new CDC_TOPIC_PREFIX) so every table is copied again", cfg.Sink.WatermarkTopic)
	if o.Timeline == 0 {
		// No checkpoint, or one written by a build that did not record the timeline.
		return fatal(fmt.Errorf("%s, and Kafka's latest checkpoint names no timeline (written by an earlier cdc version): what Kafka holds past %s is either this server's own changes, "+
			"published by a cdc that ended before it confirmed the slot here, or changes of the old primary's WAL that this server never received; "+
			"in the second case this server's own changes up to %s would be skipped as published. %s (docs/production.md#failover)",
			head, tl.SwitchPoint, kafka, restart))
	}
	return fatal(fmt.Errorf("%s, and Kafka's latest checkpoint was written on %s: what Kafka holds past %s came from the old primary's WAL, which this server never received "+
		"(the stream ran ahead of the standby: synchronized_standby_slots was not set on the old primary, or did not name this standby's slot), "+
		"and this server's own changes up to %s would be skipped as published. %s, and set synchronized_standby_slots on the primary (docs/production.md#failover)",
		head, o, tl.SwitchPoint, kafka, restart))
}
