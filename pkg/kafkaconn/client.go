package kafkaconn

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Settings are how a client reaches Kafka.
type Settings struct {
	Brokers  []string
	Security Security
	// ClientID names the client to the brokers (their logs and quotas); "" is franz-go's.
	ClientID string
	// DialTimeout bounds each connection attempt to a broker; 0 is franz-go's (10 s).
	DialTimeout time.Duration
	// RequestTimeout is what a request may take beyond its own timeout before the client
	// gives up on the connection (a broker that accepts and never answers); 0 is franz-go's.
	RequestTimeout time.Duration
	// RetryTimeout bounds the retries of a request; 0 is franz-go's.
	RetryTimeout time.Duration
}

// Opts returns the client options that apply s. It reads the certificate files now, so a
// missing or malformed one is an error here, naming the file.
func (s Settings) Opts() ([]kgo.Opt, error) {
	if len(s.Brokers) == 0 {
		return nil, errors.New("no Kafka brokers")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(s.Brokers...)}
	if s.ClientID != "" {
		opts = append(opts, kgo.ClientID(s.ClientID))
	}
	if s.DialTimeout > 0 {
		opts = append(opts, kgo.DialTimeout(s.DialTimeout))
	}
	if s.RequestTimeout > 0 {
		opts = append(opts, kgo.RequestTimeoutOverhead(s.RequestTimeout))
	}
	if s.RetryTimeout > 0 {
		opts = append(opts, kgo.RetryTimeout(s.RetryTimeout))
	}
	sec, err := s.Security.ClientOpts()
	if err != nil {
		return nil, err
	}
	return append(opts, sec...), nil
}

// NewClient builds a client from s and the caller's own options (applied after s's).
func NewClient(s Settings, opts ...kgo.Opt) (*kgo.Client, error) {
	base, err := s.Opts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}
