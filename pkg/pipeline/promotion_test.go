package pipeline

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/watermark"
)

func TestCheckPromotion(t *testing.T) {
	orders, _ := change.ParseExportID("public.orders")
	gone, _ := change.ParseExportID("public.gone")
	published := map[change.ExportID]struct{}{orders: {}}
	promoted := replication.Timeline{ID: 2, SwitchPoint: 1000}
	at := change.LSN(1000)
	other := change.LSN(1200)
	here := &watermark.Checkpoint{Position: 1500, Timeline: 2, PromotedAt: &at}
	old := &watermark.Checkpoint{Position: 1500, Timeline: 1}
	unnamed := &watermark.Checkpoint{Position: 1500}
	sibling := &watermark.Checkpoint{Position: 1500, Timeline: 2, PromotedAt: &other}
	later := &watermark.Checkpoint{Position: 1500, Timeline: 3, PromotedAt: &other}
	for _, tc := range []struct {
		name   string
		slot   replication.SlotInfo
		tl     replication.Timeline
		cp     *watermark.Checkpoint
		resume map[change.ExportID]change.LSN
		fatal  string // what the error must say; "" for none
		warn   bool
	}{
		{name: "never promoted", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: replication.Timeline{ID: 1},
			resume: map[change.ExportID]change.LSN{orders: 2000}},
		{name: "slot confirmed since the promotion", slot: replication.SlotInfo{Exists: true, Confirmed: 1500}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 2000}},
		{name: "synced slot behind Kafka", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 900}, warn: true},
		{name: "synced slot where Kafka is", slot: replication.SlotInfo{Exists: true, Confirmed: 900}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 900}},
		{name: "Kafka at the switch point", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 1000}, warn: true},
		{name: "Kafka past the switch point, no checkpoint", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 1001}, fatal: "names no timeline"},
		{name: "Kafka past the switch point, an older build's checkpoint", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			cp: unnamed, resume: map[change.ExportID]change.LSN{orders: 1500}, fatal: "either this server's own changes"},
		{name: "Kafka past the switch point from the old primary", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			cp: old, resume: map[change.ExportID]change.LSN{orders: 1500}, fatal: "written on timeline 1: what Kafka holds past 0/3E8 came from the old primary's WAL"},
		{name: "Kafka past the switch point from this server (crash before the slot was confirmed)", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			cp: here, resume: map[change.ExportID]change.LSN{orders: 1500}, warn: true},
		{name: "a sibling promoted at another point", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			cp: sibling, resume: map[change.ExportID]change.LSN{orders: 900}, fatal: "it is not the server cdc published from"},
		{name: "a checkpoint of a later timeline", slot: replication.SlotInfo{Exists: true, Confirmed: 1500}, tl: promoted,
			cp: later, resume: map[change.ExportID]change.LSN{orders: 1500}, fatal: "was written on timeline 3 (promoted at 0/4B0), and this server is on timeline 2 (promoted at 0/3E8)"},
		{name: "the old primary again, as a primary", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: replication.Timeline{ID: 1},
			cp: here, resume: map[change.ExportID]change.LSN{orders: 1500}, fatal: "did the old primary start again as a primary?"},
		{name: "an earlier timeline's checkpoint at or below the switch point", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			cp: &watermark.Checkpoint{Position: 900, Timeline: 1}, resume: map[change.ExportID]change.LSN{orders: 900}, warn: true},
		{name: "an unpublished table past it does not count", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 800, gone: 5000}, warn: true},
		{name: "slot missing is checkSlot's", slot: replication.SlotInfo{}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 5000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			cfg := Config{Slot: "tidemark", Logger: slog.New(slog.NewTextHandler(&log, nil)),
				Sink: sink.Config{WatermarkTopic: "p.__watermarks"}}
			err := checkPromotion(cfg, tc.slot, tc.tl, tc.cp, tc.resume, published)
			if got := errors.Is(err, ErrFatal); got != (tc.fatal != "") {
				t.Fatalf("fatal = %v (%v), want %v", got, err, tc.fatal != "")
			}
			if tc.fatal != "" && !strings.Contains(err.Error(), tc.fatal) {
				t.Errorf("error lacks %q: %v", tc.fatal, err)
			}
			if got := strings.Contains(log.String(), "failover: this server was promoted"); got != tc.warn {
				t.Errorf("warned = %v, want %v: %s", got, tc.warn, log.String())
			}
		})
	}
}

func TestCheckSlotMissingOnPromotedServer(t *testing.T) {
	orders, _ := change.ParseExportID("public.orders")
	cfg := Config{Slot: "tidemark", Sink: sink.Config{WatermarkTopic: "p.__watermarks"}}
	err := checkSlot(cfg, replication.SlotInfo{}, replication.Timeline{ID: 3, SwitchPoint: 0x3000000},
		map[change.ExportID]change.LSN{orders: 1}, map[change.ExportID]struct{}{orders: {}})
	if !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "this server was promoted at 0/3000000 (timeline 3)") {
		t.Errorf("err = %v", err)
	}
}

// TestCheckpointNamesTimeline: the checkpoint an exactly-once transaction carries names the
// timeline the life reads, so that the first transaction past a promotion records it.
func TestCheckpointNamesTimeline(t *testing.T) {
	o, _ := newTestOwner(t, Config{}, nil, nil)
	o.origin = originOf(replication.Timeline{ID: 2, SwitchPoint: 0x7FAE060})
	recs := o.carry([]*change.Unit{{Kind: change.KindProgress, End: 0x816A758}})
	if len(recs) != 1 || string(recs[0].Key) != watermark.CheckpointKey {
		t.Fatalf("carry = %v, want one checkpoint", recs)
	}
	cp, ok, err := watermark.DecodeCheckpoint(recs[0].Value)
	if err != nil || !ok || cp.Position != 0x816A758 || cp.Origin() != o.origin {
		t.Errorf("checkpoint %s: %+v, %v, %v; want position 0/816A758 on %v", recs[0].Value, cp, ok, err, o.origin)
	}
}

// TestCheckSlotChunkedNothingDurable: a first life that created the slot and started a chunked
// copy, then stopped before anything of the table reached Kafka (a registry it could not use,
// say), left the table at own position 0 with no chunk done, and the slot confirmed where it
// was created. Nothing was lost: the copy starts again from its first chunk, so the restart is
// allowed. A copy with a durable position behind the slot is still refused.
func TestCheckSlotChunkedNothingDurable(t *testing.T) {
	orders, _ := change.ParseExportID("public.orders")
	cfg := Config{Slot: "tidemark", Sink: sink.Config{WatermarkTopic: "p.__watermarks"}}
	slot := replication.SlotInfo{Exists: true, Confirmed: 0x1D470E8, WALStatus: "reserved"}
	published := map[change.ExportID]struct{}{orders: {}}
	// The first life's only record of the table: its chunked copy began.
	tr := watermark.NewTracker(watermark.Options{})
	tr.Restore([]watermark.Record{{Version: watermark.Version, Export: orders, Topic: "p.public.orders",
		State: watermark.StateHydrating, Snapshot: &watermark.SnapshotInfo{Attempt: 1, Strategy: watermark.StrategyChunked}}})
	resume := tr.Resume()
	if p, ok := resume[orders]; !ok || p != 0 {
		t.Fatalf("Resume = %v, want public.orders at 0/0", resume)
	}
	if err := checkSlot(cfg, slot, replication.Timeline{ID: 1}, withoutUnstarted(tr, resume), published); err != nil {
		t.Errorf("nothing durable, slot at its creation point: %v", err)
	}
	err := checkSlot(cfg, slot, replication.Timeline{ID: 1}, withoutUnstarted(tr, map[change.ExportID]change.LSN{orders: 0x1D47000}), published)
	if !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "past export public.orders's own position 0/1D47000") {
		t.Errorf("durable position behind the slot: err = %v, want the fatal refusal", err)
	}
}
