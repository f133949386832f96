package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaOpts are the franz-go options of every Kafka client the applier opens: TLS and SASL (the
// CDC_KAFKA_TLS* and CDC_KAFKA_SASL* variables, as cdc reads them) and the bounds of
// APPLY_CONNECT_TIMEOUT. A dial, TCP and TLS, waits at most the connect timeout; so does a
// request beyond its own wait (a fetch's, for instance): a broker that accepted the connection
// and never answers kills it then, and franz-go dials again. A request is retried for at most
// three connect timeouts (franz-go's default 30s, with the default 10s).
func kafkaOpts(cfg config) ([]kgo.Opt, error) {
	opts, err := cfg.security.ClientOpts()
	if err != nil {
		return nil, err
	}
	d := cfg.connectTimeout
	if d <= 0 {
		d = defaultConnectTimeout
	}
	return append(opts,
		kgo.DialTimeout(d),
		kgo.RequestTimeoutOverhead(d),
		kgo.RetryTimeout(3*d),
	), nil
}

// pingKafka asks every seed broker for metadata at once and returns when one answers, or with
// an error that says what to check when none does within the connect timeout. The reader's own
// client retries in silence; a session begins with this, so that a broker that cannot be
// reached, or accepts connections and never answers, is an error that the session's restart
// logs, within the connect timeout.
func pingKafka(ctx context.Context, cfg config) error {
	opts, err := kafkaOpts(cfg)
	if err != nil {
		return fmt.Errorf("kafka security: %w", err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.brokers...), kgo.RequestRetries(0)}, opts...)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	d := cfg.connectTimeout
	if d <= 0 {
		d = defaultConnectTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	seeds := cl.SeedBrokers()
	errs := make(chan error, len(seeds))
	for _, b := range seeds {
		go func() {
			_, err := b.Request(pctx, kmsg.NewPtrMetadataRequest())
			errs <- err
		}()
	}
	for range seeds {
		if err = <-errs; err == nil {
			return nil // the others end with pctx
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	brokers := strings.Join(cfg.brokers, ",")
	if ne, ok := errors.AsType[net.Error](err); pctx.Err() != nil || ok && ne.Timeout() {
		return fmt.Errorf("cannot reach Kafka at %s: no answer within the connect timeout of %s (%w); check CDC_KAFKA_BROKERS and that the brokers are running and reachable",
			brokers, d, err)
	}
	return fmt.Errorf("cannot reach Kafka at %s: %w; check CDC_KAFKA_BROKERS", brokers, err)
}
