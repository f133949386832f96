// Command tidemark-tail prints every record of the Kafka topics whose names start with a prefix,
// from the start of each partition up to its end at launch, then exits. It reads committed data
// only (read_committed), as a consumer of an exactly-once pipeline would.
//
//	tidemark-tail -brokers 127.0.0.1:59092 -prefix demo
//	TAIL_BROKERS=127.0.0.1:59092 TAIL_PREFIX=demo tidemark-tail
//
// Output, one line per record, tab-separated: topic, partition, offset, key, value (headers
// follow as name=value when present). A nil value (tombstone) prints as <nil>. Values that are
// not UTF-8 print Go-quoted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "tidemark-tail: %v\n", err)
		os.Exit(1)
	}
}

type config struct {
	brokers []string
	prefix  string
	timeout time.Duration
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("tidemark-tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", envOr(getenv, "TAIL_BROKERS", "127.0.0.1:59092"),
		"Kafka seed brokers, comma-separated (env TAIL_BROKERS)")
	prefix := fs.String("prefix", envOr(getenv, "TAIL_PREFIX", "tidemark"),
		"print topics whose names start with this prefix followed by a dot (env TAIL_PREFIX)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up when the records are not all read by then")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	cfg := config{prefix: *prefix, timeout: *timeout}
	for b := range strings.SplitSeq(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.brokers = append(cfg.brokers, b)
		}
	}
	var errs []error
	if len(cfg.brokers) == 0 {
		errs = append(errs, errors.New("no brokers: set -brokers or TAIL_BROKERS"))
	}
	if cfg.prefix == "" {
		errs = append(errs, errors.New("empty prefix: set -prefix or TAIL_PREFIX"))
	}
	if cfg.timeout <= 0 {
		errs = append(errs, errors.New("timeout must be positive"))
	}
	return cfg, errors.Join(errs...)
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	admCl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...))
	if err != nil {
		return fmt.Errorf("create kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	targets, err := endOffsets(ctx, adm, cfg.prefix+".")
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		fmt.Fprintf(stderr, "tidemark-tail: no records in topics %s.*\n", cfg.prefix)
		return nil
	}
	return consume(ctx, cfg.brokers, targets, stdout)
}

// span is the offsets of one partition to read: [start, end).
type span struct{ start, end int64 }

// endOffsets returns, per topic with the prefix and per non-empty partition, the offsets to read.
// The end is the last stable offset, so open transactions do not hold the reader.
func endOffsets(ctx context.Context, adm *kadm.Client, prefix string) (map[string]map[int32]span, error) {
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	var names []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	starts, err := adm.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	if err := starts.Error(); err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	targets := make(map[string]map[int32]span)
	ends.Each(func(o kadm.ListedOffset) {
		start := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			start = s.Offset
		}
		if o.Offset <= start {
			return
		}
		if targets[o.Topic] == nil {
			targets[o.Topic] = make(map[int32]span)
		}
		targets[o.Topic][o.Partition] = span{start: start, end: o.Offset}
	})
	return targets, nil
}

// consume prints the records of targets in topic, partition, offset order.
func consume(ctx context.Context, brokers []string, targets map[string]map[int32]span, stdout io.Writer) error {
	assign := make(map[string]map[int32]kgo.Offset)
	remaining := 0
	for topic, parts := range targets {
		assign[topic] = make(map[int32]kgo.Offset)
		for p, s := range parts {
			assign[topic][p] = kgo.NewOffset().At(s.start)
			remaining++
		}
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(assign),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers take offsets too: keep them to see when a partition is done.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return fmt.Errorf("create kafka consumer: %w", err)
	}
	defer cl.Close()

	type tp struct {
		topic     string
		partition int32
	}
	got := make(map[tp][]*kgo.Record)
	done := make(map[tp]bool)
	var readErr error
	for remaining > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			// Print what was read, then report the rest.
			readErr = fmt.Errorf("read records (%d partition(s) unfinished): %w", remaining, err)
			break
		}
		var fetchErr error
		fetches.EachError(func(topic string, p int32, err error) {
			fetchErr = errors.Join(fetchErr, fmt.Errorf("fetch %s[%d]: %w", topic, p, err))
		})
		if fetchErr != nil {
			return fetchErr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			end := targets[r.Topic][r.Partition].end
			if done[k] || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				got[k] = append(got[k], r)
			}
			if r.Offset+1 >= end {
				done[k] = true
				remaining--
			}
		})
	}

	keys := make([]tp, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b tp) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	for _, k := range keys {
		for _, r := range got[k] {
			if _, err := io.WriteString(stdout, formatRecord(r)); err != nil {
				return fmt.Errorf("write output: %w", err)
			}
		}
	}
	return readErr
}

func formatRecord(r *kgo.Record) string {
	var b strings.Builder
	b.WriteString(r.Topic)
	b.WriteByte('\t')
	b.WriteString(strconv.Itoa(int(r.Partition)))
	b.WriteByte('\t')
	b.WriteString(strconv.FormatInt(r.Offset, 10))
	b.WriteByte('\t')
	b.WriteString(printable(r.Key))
	b.WriteByte('\t')
	b.WriteString(printable(r.Value))
	for _, h := range r.Headers {
		b.WriteByte('\t')
		b.WriteString(h.Key)
		b.WriteByte('=')
		b.WriteString(printable(h.Value))
	}
	b.WriteByte('\n')
	return b.String()
}

func printable(v []byte) string {
	switch {
	case v == nil:
		return "<nil>"
	case utf8.Valid(v) && !strings.ContainsAny(string(v), "\t\n"):
		return string(v)
	default:
		return strconv.Quote(string(v))
	}
}
