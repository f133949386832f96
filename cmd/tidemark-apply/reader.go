package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// reader adapts pkg/consumer's Reader to the applier: each part becomes a batch.
type reader struct {
	rd  *consumer.Reader
	log *slog.Logger
	// last is the last source transaction counted, so that one spread over parts counts once.
	last txnID
	// loaded are the source transactions in the loads of tables not joined yet (a few bytes
	// each); the cut that joins a table counts those at or above its Prev once, with its own
	// (seen, for that cut). A transaction that touched a table being copied again and another
	// table comes in two halves: the load's, and the joining cut's.
	loaded map[change.ExportID]map[txnID]bool
	seen   map[txnID]bool
}

type txnID struct {
	lsn change.LSN
	id  uint32
}

// openConsumer opens the reader at position (the JSON of a consumer.Position, "" for the
// start). Every chosen table must have joined before the first cut (WaitAll), so the target
// never shows one table of the set without the others.
func openConsumer(ctx context.Context, cfg config, position string, log *slog.Logger) (cutSource, error) {
	var reg *schemareg.Client
	if cfg.registry.URL != "" {
		rc := cfg.registry
		rc.Logger = log
		var err error
		if reg, err = schemareg.New(rc); err != nil {
			return nil, fmt.Errorf("%w: %w", err, errPermanent)
		}
	}
	rd, err := consumer.New(consumer.Config{
		Registry:       reg,
		Kafka:          kafkaSettings(cfg),
		WatermarkTopic: cfg.watermarkTopic,
		Tables:         cfg.tables,
		Accept:         cfg.accepts,
		TopicPrefix:    cfg.topicPrefix,
		WaitAll:        len(cfg.tables) > 0,
		Logger:         log,
	})
	if err != nil {
		return nil, err
	}
	if err := pingKafka(ctx, cfg, rd); err != nil {
		rd.Close()
		return nil, err
	}
	if position != "" {
		pos, err := consumer.ParsePosition([]byte(position))
		if err != nil {
			rd.Close()
			return nil, fmt.Errorf("progress row's position: %w: %w", err, errPermanent)
		}
		if err := rd.Resume(pos); err != nil {
			rd.Close()
			return nil, fmt.Errorf("resume at %s: %w", pos.LSN, err)
		}
	}
	return &reader{rd: rd, log: log}, nil
}

func (r *reader) Close() { r.rd.Close() }

// Watermark is the highest watermark read and when (consumer.Reader.Watermark).
func (r *reader) Watermark() (change.LSN, time.Time) { return r.rd.Watermark() }

// Next returns the next part as a batch.
func (r *reader) Next(ctx context.Context) (*batch, error) {
	part, err := r.rd.Read(ctx)
	if errors.Is(err, consumer.ErrContract) {
		// A record no cdc writes: reading it again will not change it.
		return nil, fmt.Errorf("%w: %w", err, errPermanent)
	}
	if err != nil {
		return nil, err
	}
	return r.batchOf(ctx, part)
}

// batchOf turns a part into a batch. A cut's events come first: a table that joins (its first
// copy, or a new one after a reset) has its loaded shadow made the table in the cut's
// transaction, so the target never shows it empty or half copied. Removed and failed tables
// are left as they are.
func (r *reader) batchOf(ctx context.Context, part *consumer.Cut) (*batch, error) {
	b := &batch{lsn: part.LSN, part: part.Part, final: part.Final, load: part.Load}
	if part.Final && part.Load == nil {
		pos, err := json.Marshal(part.Position)
		if err != nil {
			return nil, fmt.Errorf("position of cut %s: %w", part.LSN, err)
		}
		b.position = string(pos)
	}
	b.steps = make([]step, 0, len(part.Events)+part.Changes())
	for _, ev := range part.Events {
		switch ev.Kind {
		case consumer.EventJoined:
			r.log.Info("table joins: its loaded copy is committed with this cut", "export", ev.Export.String(), "attempt", ev.Attempt)
			b.steps = append(b.steps, step{kind: stepJoin, export: ev.Export})
		case consumer.EventReset:
			r.log.Info("table is copied again: the target keeps its rows, and the cuts wait, until the new copy joins", "export", ev.Export.String(), "attempt", ev.Attempt)
		case consumer.EventRemoved:
			r.log.Warn("table removed from the publication: no longer applied", "export", ev.Export.String())
			b.gone = append(b.gone, ev.Export)
		case consumer.EventFailed:
			r.log.Error("table failed in cdc: no longer applied", "export", ev.Export.String(), "error", ev.Error)
			b.gone = append(b.gone, ev.Export)
		}
	}
	if part.Load != nil && part.Part == 0 {
		if r.loaded == nil {
			r.loaded = map[change.ExportID]map[txnID]bool{}
		}
		r.loaded[part.Load.Export] = map[txnID]bool{}
	}
	if part.Load == nil && part.Part == 0 {
		r.seen = nil
		for _, ev := range part.Events {
			if ev.Kind != consumer.EventJoined {
				continue
			}
			for id := range r.loaded[ev.Export] {
				if r.seen == nil {
					r.seen = map[txnID]bool{}
				}
				if id.lsn >= part.Prev && !r.seen[id] {
					r.seen[id] = true
					b.txns++
				}
			}
			delete(r.loaded, ev.Export)
		}
	}
	var latest int64
	for _, tx := range part.Txns {
		switch id := (txnID{tx.CommitLSN, tx.TxID}); {
		case tx.Snapshot:
		case part.Load != nil:
			r.loaded[part.Load.Export][id] = true
		case id != r.last && !r.seen[id]:
			b.txns++
			r.last = id
		}
		for i := range tx.Changes {
			ch := &tx.Changes[i]
			if !tx.Snapshot && ch.Source.TsMs > latest {
				latest = ch.Source.TsMs
			}
			var schema json.RawMessage
			if ch.Op != change.OpTruncate {
				schema = ch.Schema // nil for json
			}
			b.steps = append(b.steps, step{
				kind: stepRecord, export: ch.Export, op: byte(ch.Op), key: ch.Key,
				before: ch.Before, after: ch.After, schema: schema, dec: ch.Decoder,
				unchanged: len(ch.Unchanged) > 0, newKey: ch.NewKey, oldKey: ch.OldKey,
				lsn: ch.Source.LSN, sequence: ch.Source.Sequence,
				topic: ch.Topic, partition: ch.Partition, offset: ch.Offset,
			})
		}
	}
	if latest > 0 {
		b.commitTime = time.UnixMilli(latest)
	}
	return b, nil
}
