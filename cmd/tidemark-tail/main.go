// Command tidemark-tail prints every record of the Kafka topics whose names start with a prefix,
// from the start of each partition up to its end at launch, then exits. It reads committed data
// only (read_committed), as a consumer of an exactly-once pipeline would.
//
//	tidemark-tail -brokers 127.0.0.1:59092 -prefix demo
//	TAIL_BROKERS=127.0.0.1:59092 TAIL_PREFIX=demo tidemark-tail
//
// TLS and SASL come from the same variables as cdc's (CDC_KAFKA_TLS, CDC_KAFKA_TLS_CA_FILE,
// CDC_KAFKA_SASL_MECHANISM, ...; see cdc help), with the same rules; the brokers from -brokers,
// TAIL_BROKERS or CDC_KAFKA_BROKERS. Avro records (CDC_VALUE_FORMAT=avro) are shown as JSON
// through the schema registry of cdc's CDC_SCHEMA_REGISTRY_* variables.
//
// Output, one line per record, tab-separated: topic, partition, offset, key, value (headers
// follow as name=value when present). Keys and values are shown as JSON, as the decoder of
// their record format reads them (pkg/format/formats recognises the format; the JSON formats
// print as written). Records are printed as they arrive: in offset order within
// a partition, partitions interleaved. A nil value (tombstone) prints as <nil>. A key, value or
// header that a terminal could take for something else is printed Go-quoted, every control
// character escaped: C0 and C1 controls, DEL (so no ANSI escape sequence reaches the terminal),
// tabs and newlines, invalid UTF-8 and Unicode format characters such as bidirectional overrides.
// Printable Unicode is kept. A value that starts with a double quote or is <nil> is quoted too,
// so every line reads back unambiguously.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/formats"
	"github.com/tidemark/cdc/pkg/kafkaconn"
	"github.com/tidemark/cdc/pkg/schemareg"
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
	brokers  []string
	prefix   string
	timeout  time.Duration
	security kafkaconn.Security
	registry schemareg.Config // URL "" when none is set
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("tidemark-tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", envOr(getenv, "127.0.0.1:59092", "TAIL_BROKERS", "CDC_KAFKA_BROKERS"),
		"Kafka seed brokers, comma-separated (env TAIL_BROKERS, else CDC_KAFKA_BROKERS); TLS and SASL from cdc's CDC_KAFKA_TLS* and CDC_KAFKA_SASL* variables")
	prefix := fs.String("prefix", envOr(getenv, "tidemark", "TAIL_PREFIX"),
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
	sec, problems := kafkaconn.ReadSecurityEnv(getenv).Security()
	for _, p := range problems {
		errs = append(errs, p)
	}
	cfg.security = sec
	reg, regProblems := schemareg.ReadEnv(getenv).Config()
	for _, p := range regProblems {
		errs = append(errs, p)
	}
	cfg.registry = reg
	return cfg, errors.Join(errs...)
}

// envOr returns the first of keys that getenv has, else def.
func envOr(getenv func(string) string, def string, keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
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
	settings := kafkaconn.Settings{Brokers: cfg.brokers, Security: cfg.security, ClientID: "tidemark-tail"}
	admCl, err := kafkaconn.NewClient(settings)
	if err != nil {
		return fmt.Errorf("create kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	targets, err := endOffsets(ctx, adm, cfg.prefix+".")
	if err != nil {
		return kafkaconn.ExplainConnect(cfg.security, err)
	}
	if len(targets) == 0 {
		fmt.Fprintf(stderr, "tidemark-tail: no records in topics %s.*\n", cfg.prefix)
		return nil
	}
	var reg *schemareg.Client
	if cfg.registry.URL != "" {
		if reg, err = schemareg.New(cfg.registry); err != nil {
			return err
		}
	}
	return consume(ctx, settings, targets, formats.NewDecoders(reg), stdout)
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

// consume prints the records of targets as they arrive, in offset order within each partition,
// flushing stdout after every fetch, so a long read shows its first records at once.
func consume(ctx context.Context, settings kafkaconn.Settings, targets map[string]map[int32]span, decs *formats.Decoders, stdout io.Writer) error {
	assign := make(map[string]map[int32]kgo.Offset)
	remaining := 0
	for topic, parts := range targets {
		assign[topic] = make(map[int32]kgo.Offset)
		for p, s := range parts {
			assign[topic][p] = kgo.NewOffset().At(s.start)
			remaining++
		}
	}
	cl, err := kafkaconn.NewClient(settings,
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
	done := make(map[tp]bool)
	out := bufio.NewWriter(stdout)
	var line, text []byte
	for remaining > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read records (%d partition(s) unfinished): %w", remaining, err)
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
				line, text = appendRecord(line[:0], text, r, decs)
				_, _ = out.Write(line)
			}
			if r.Offset+1 >= end {
				done[k] = true
				remaining--
			}
		})
		if err := out.Flush(); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	return nil
}

// appendRecord appends r's output line to dst. Key and value are shown as the decoder of their
// format reads them (decs recognises it from the value, else from the key), in JSON; text is a
// buffer for that, returned for reuse.
func appendRecord(dst, text []byte, r *kgo.Record, decs *formats.Decoders) ([]byte, []byte) {
	dec := decs.For(r.Value)
	if r.Value == nil {
		dec = decs.For(r.Key)
	}
	dst = append(dst, r.Topic...)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, int64(r.Partition), 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, r.Offset, 10)
	dst = append(dst, '\t')
	dst = appendPrintable(dst, decoded(dec, &text, r.Key))
	dst = append(dst, '\t')
	dst = appendPrintable(dst, decoded(dec, &text, r.Value))
	for _, h := range r.Headers {
		dst = append(dst, '\t')
		if strings.Contains(h.Key, "=") {
			dst = strconv.AppendQuote(dst, h.Key) // the name ends at the first '='
		} else {
			dst = appendPrintable(dst, []byte(h.Key))
		}
		dst = append(dst, '=')
		dst = appendPrintable(dst, h.Value)
	}
	return append(dst, '\n'), text
}

// decoded returns b as dec shows it, in *text (nil stays nil).
func decoded(dec format.Decoder, text *[]byte, b []byte) []byte {
	if b == nil {
		return nil
	}
	*text = dec.AppendJSON((*text)[:0], b)
	return *text
}

// printable is v as tidemark-tail prints it (see the package comment).
func printable(v []byte) string { return string(appendPrintable(nil, v)) }

// appendPrintable appends v to dst as it is when every rune is printable (strconv.IsPrint:
// letters, marks, numbers, punctuation, symbols and the ASCII space) and nothing makes it
// ambiguous; otherwise Go-quoted (strconv.Quote escapes exactly the runes that are not
// printable, and invalid UTF-8). nil is <nil>.
func appendPrintable(dst, v []byte) []byte {
	if v == nil {
		return append(dst, "<nil>"...)
	}
	if needsQuote(v) {
		return strconv.AppendQuote(dst, string(v))
	}
	return append(dst, v...)
}

func needsQuote(v []byte) bool {
	if len(v) > 0 && v[0] == '"' || string(v) == "<nil>" {
		return true
	}
	for len(v) > 0 {
		r, size := utf8.DecodeRune(v)
		if r == utf8.RuneError && size <= 1 || !strconv.IsPrint(r) {
			return true
		}
		v = v[size:]
	}
	return false
}
