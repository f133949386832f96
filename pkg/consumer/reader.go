package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/sink"
)

// Config configures a Reader. Brokers and WatermarkTopic are required.
type Config struct {
	Brokers []string
	// WatermarkTopic is cdc's watermark topic, <prefix>.__watermarks.
	WatermarkTopic string
	// Tables are the chosen tables; empty means every export the watermark topic names.
	Tables []change.ExportID
	// WaitAll delays the first cut until every table in Tables has joined (is hydrated), so that
	// no cut shows one chosen table without another. Later re-copies still let the others go
	// on.
	WaitAll bool
	// Opts are extra franz-go options: TLS, SASL, fetch sizes (see SecurityOpts).
	Opts []kgo.Opt
	// Logger, nil for slog.Default().
	Logger *slog.Logger
}

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("consumer closed")

// Reader delivers cuts. It is not safe for concurrent use.
type Reader struct {
	cfg    Config
	log    *slog.Logger
	client *kgo.Client
	st     *state
}

// New returns a reader that starts at the beginning of every chosen table's current copy (or
// at Resume's position, when called before the first Next).
func New(cfg Config) (*Reader, error) {
	var problems []error
	if len(cfg.Brokers) == 0 {
		problems = append(problems, errors.New("consumer: no brokers"))
	}
	if cfg.WatermarkTopic == "" {
		problems = append(problems, errors.New("consumer: no watermark topic"))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{}),
	}
	cl, err := kgo.NewClient(append(opts, cfg.Opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	r := &Reader{cfg: cfg, log: log.With("stage", "consumer"), client: cl, st: newState(cfg.Tables, cfg.WaitAll)}
	return r, nil
}

// Resume makes the reader go on after the cut whose Position pos is. Call it before the first
// Next.
func (r *Reader) Resume(pos Position) error {
	return r.st.resume(pos)
}

// Close releases the client.
func (r *Reader) Close() { r.client.Close() }

// SecurityOpts builds the TLS and SASL options from the CDC_KAFKA_TLS* and CDC_KAFKA_SASL*
// variables, read through getenv and checked as cdc checks them (every problem at once).
func SecurityOpts(getenv func(string) string) ([]kgo.Opt, error) {
	sec, problems := sink.ReadSecurityEnv(getenv).Security()
	if len(problems) > 0 {
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = p
		}
		return nil, errors.Join(errs...)
	}
	opts, err := sec.ClientOpts()
	if err != nil {
		return nil, fmt.Errorf("kafka security: %w", err)
	}
	return opts, nil
}

// Next blocks until the next cut is complete and returns it, or until ctx ends.
func (r *Reader) Next(ctx context.Context) (*Cut, error) {
	return nil, errors.New("not implemented yet")
}
