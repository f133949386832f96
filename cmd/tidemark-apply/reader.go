package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
)

// reader adapts pkg/consumer's Reader to the applier: each cut becomes a batch.
type reader struct {
	rd      *consumer.Reader
	schemas *schemas
	log     *slog.Logger
}

// openConsumer opens the reader at position (the JSON of a consumer.Position, "" for the
// start). Every chosen table must have joined before the first cut (WaitAll), so the target
// never shows one table of the set without the others.
func openConsumer(ctx context.Context, cfg config, position string, log *slog.Logger) (cutSource, error) {
	opts, err := cfg.security.ClientOpts()
	if err != nil {
		return nil, fmt.Errorf("kafka security: %w", err)
	}
	rd, err := consumer.New(consumer.Config{
		Brokers:        cfg.brokers,
		WatermarkTopic: cfg.watermarkTopic,
		Tables:         cfg.tables,
		WaitAll:        len(cfg.tables) > 0,
		Opts:           opts,
		Logger:         log,
	})
	if err != nil {
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
	sch := &schemas{opts: append([]kgo.Opt{kgo.SeedBrokers(cfg.brokers...)}, opts...), byName: map[change.ExportID]*tableSchema{}}
	return &reader{rd: rd, schemas: sch, log: log}, nil
}

func (r *reader) Close() { r.rd.Close() }

// Next returns the next cut as a batch.
func (r *reader) Next(ctx context.Context) (*batch, error) {
	cut, err := r.rd.Next(ctx)
	if err != nil {
		return nil, err
	}
	return batchOf(ctx, cut, r.schemas, r.log)
}

// batchOf turns a cut into a batch. Events come first: a table that joins (its first copy, or
// a new one after a reset) is cleared in the same transaction that writes its copy, so the
// target never shows it empty or half copied. Removed and failed tables are left as they are.
func batchOf(ctx context.Context, cut *consumer.Cut, sch *schemas, log *slog.Logger) (*batch, error) {
	pos, err := json.Marshal(cut.Position)
	if err != nil {
		return nil, fmt.Errorf("position of cut %s: %w", cut.LSN, err)
	}
	b := &batch{lsn: cut.LSN, position: string(pos)}
	b.steps = make([]step, 0, len(cut.Events)+cut.Changes())
	for _, ev := range cut.Events {
		switch ev.Kind {
		case consumer.EventJoined:
			log.Info("table joins: cleared in the target and copied", "export", ev.Export.String(), "attempt", ev.Attempt)
			b.steps = append(b.steps, step{kind: stepReset, export: ev.Export})
		case consumer.EventReset:
			log.Info("table is copied again: the target keeps its rows until the new copy joins", "export", ev.Export.String(), "attempt", ev.Attempt)
		case consumer.EventRemoved:
			log.Warn("table removed from the publication: no longer applied", "export", ev.Export.String())
		case consumer.EventFailed:
			log.Error("table failed in cdc: no longer applied", "export", ev.Export.String(), "error", ev.Error)
		}
	}
	var latest int64
	for _, tx := range cut.Txns {
		if !tx.Snapshot {
			b.txns++
		}
		for i := range tx.Changes {
			ch := &tx.Changes[i]
			if !tx.Snapshot && ch.Source.TsMs > latest {
				latest = ch.Source.TsMs
			}
			var schema json.RawMessage
			if ch.Op != change.OpTruncate {
				if schema, err = sch.of(ctx, ch); err != nil {
					return nil, err
				}
			}
			b.steps = append(b.steps, step{
				kind: stepRecord, export: ch.Export, op: byte(ch.Op), key: ch.Key,
				before: ch.Before, after: ch.After, schema: schema,
				unchanged: len(ch.Unchanged) > 0, newKey: ch.NewKey,
				lsn: ch.Source.LSN, sequence: ch.Source.Sequence,
			})
		}
	}
	if latest > 0 {
		b.commitTime = time.UnixMilli(latest)
	}
	return b, nil
}
