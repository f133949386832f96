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
)

func TestCheckPromotion(t *testing.T) {
	orders, _ := change.ParseExportID("public.orders")
	gone, _ := change.ParseExportID("public.gone")
	published := map[change.ExportID]struct{}{orders: {}}
	promoted := replication.Timeline{ID: 2, SwitchPoint: 1000}
	for _, tc := range []struct {
		name   string
		slot   replication.SlotInfo
		tl     replication.Timeline
		resume map[change.ExportID]change.LSN
		fatal  bool
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
		{name: "Kafka past the switch point", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 1001}, fatal: true},
		{name: "an unpublished table past it does not count", slot: replication.SlotInfo{Exists: true, Confirmed: 500}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 800, gone: 5000}, warn: true},
		{name: "slot missing is checkSlot's", slot: replication.SlotInfo{}, tl: promoted,
			resume: map[change.ExportID]change.LSN{orders: 5000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			cfg := Config{Slot: "tidemark", Logger: slog.New(slog.NewTextHandler(&log, nil)),
				Sink: sink.Config{WatermarkTopic: "p.__watermarks"}}
			err := checkPromotion(cfg, tc.slot, tc.tl, tc.resume, published)
			if got := errors.Is(err, ErrFatal); got != tc.fatal {
				t.Fatalf("fatal = %v (%v), want %v", got, err, tc.fatal)
			}
			if tc.fatal && !strings.Contains(err.Error(), "past the promotion") {
				t.Errorf("error lacks the case: %v", err)
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
