package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/tidemark/cdc/pkg/consumer"
	"github.com/tidemark/cdc/pkg/kafkaconn"
)

// kafkaSettings are how the applier's one Kafka client (the reader's) reaches Kafka: TLS and
// SASL (the CDC_KAFKA_TLS* and CDC_KAFKA_SASL* variables, as cdc reads them) and the bounds of
// APPLY_CONNECT_TIMEOUT. A dial, TCP and TLS, waits at most the connect timeout; so does a
// request beyond its own wait (a fetch's, for instance): a broker that accepted the connection
// and never answers kills it then, and franz-go dials again. A request is retried for at most
// three connect timeouts (franz-go's default 30s, with the default 10s).
func kafkaSettings(cfg config) kafkaconn.Settings {
	d := cfg.connectTimeout
	if d <= 0 {
		d = defaultConnectTimeout
	}
	return kafkaconn.Settings{Brokers: cfg.brokers, Security: cfg.security, ClientID: "tidemark-apply",
		DialTimeout: d, RequestTimeout: d, RetryTimeout: 3 * d}
}

// pingKafka asks every seed broker for metadata at once, on the reader's client, and returns
// when one answers, or with an error that says what to check when none does within the connect
// timeout. The reader's fetches retry in silence; a session begins with this, so that a broker
// that cannot be reached, or accepts connections and never answers, is an error that the
// session's restart logs, within the connect timeout.
func pingKafka(ctx context.Context, cfg config, rd *consumer.Reader) error {
	d := cfg.connectTimeout
	if d <= 0 {
		d = defaultConnectTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := rd.Ping(pctx)
	if err == nil {
		return nil
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
