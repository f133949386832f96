package schemareg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// ID is a schema's id in the registry: what follows the magic byte in Confluent's wire format.
type ID int32

// Client registers and looks up schemas in one registry. It is safe for concurrent use; two
// goroutines registering the same new schema at once both ask the registry, which gives both the
// same id.
type Client struct {
	sr                 *sr.Client
	url                string
	retryMin, retryMax time.Duration
	log                *slog.Logger

	mu      sync.Mutex
	ids     map[schemaKey]ID
	schemas map[ID]sr.Schema
	status  Status
}

type schemaKey struct {
	subject string
	typ     sr.SchemaType
	text    string
}

// Status is the registry's reachability as the Client last saw it.
type Status struct {
	// Since is when the failures in a row began; zero when the last request got an answer.
	Since time.Time
	// Err is the last failure, Attempts how many failed in a row.
	Err      error
	Attempts int
}

// Reachable reports whether the last request got an answer.
func (s Status) Reachable() bool { return s.Err == nil }

// New builds a client from cfg. It reads the TLS files now and does not contact the registry.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("schema registry: no URL")
	}
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	timeout := orDefault(cfg.RequestTimeout, DefaultRequestTimeout)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	opts := []sr.ClientOpt{
		sr.URLs(strings.TrimRight(cfg.URL, "/")),
		sr.HTTPClient(&http.Client{Timeout: timeout, Transport: tr}),
		sr.UserAgent("tidemark"),
	}
	if cfg.Username != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry client: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Client{
		sr: cl, url: cfg.URL, log: log,
		retryMin: orDefault(cfg.RetryMin, DefaultRetryMin), retryMax: orDefault(cfg.RetryMax, DefaultRetryMax),
		ids: make(map[schemaKey]ID), schemas: make(map[ID]sr.Schema),
	}
	c.retryMax = max(c.retryMax, c.retryMin)
	return c, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Register registers the schema text of type typ under subject, or finds it registered, and
// returns the id the registry gave it; the answer is cached by (subject, type, text). A schema
// the subject's compatibility level refuses is an *IncompatibleError. An unreachable registry is
// retried until ctx ends.
func (c *Client) Register(ctx context.Context, subject string, typ sr.SchemaType, text string) (ID, error) {
	key := schemaKey{subject, typ, text}
	c.mu.Lock()
	id, ok := c.ids[key]
	c.mu.Unlock()
	if ok {
		return id, nil
	}
	var got int
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		got, err = c.sr.RegisterSchema(ctx, subject, sr.Schema{Schema: text, Type: typ}, -1, -1)
		return err
	})
	if err != nil {
		if re, ok := errors.AsType[*sr.ResponseError](err); ok && re.StatusCode == http.StatusConflict {
			return 0, c.incompatible(ctx, subject, re)
		}
		return 0, fmt.Errorf("register schema under subject %q: %w", subject, c.explain(err))
	}
	if got <= 0 || got > math.MaxInt32 {
		return 0, fmt.Errorf("register schema under subject %q: the registry answered id %d, which the wire format cannot carry", subject, got)
	}
	id = ID(got)
	c.mu.Lock()
	c.ids[key] = id
	c.mu.Unlock()
	return id, nil
}

// Schema returns the schema of id, cached once fetched. An id the registry does not know is
// ErrNotFound.
func (c *Client) Schema(ctx context.Context, id ID) (sr.Schema, error) {
	c.mu.Lock()
	s, ok := c.schemas[id]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		s, err = c.sr.SchemaByID(ctx, int(id))
		return err
	})
	if err != nil {
		if re, ok := errors.AsType[*sr.ResponseError](err); ok && re.StatusCode == http.StatusNotFound {
			return sr.Schema{}, fmt.Errorf("schema id %d: %w (%s)", id, ErrNotFound, re.Error())
		}
		return sr.Schema{}, fmt.Errorf("schema id %d: %w", id, c.explain(err))
	}
	c.mu.Lock()
	c.schemas[id] = s
	c.mu.Unlock()
	return s, nil
}

// Compatibility returns the compatibility level that applies to subject: its own, or the
// registry's global one when it has none (subject "" asks for the global one). It is not retried:
// cdc check asks it once.
func (c *Client) Compatibility(ctx context.Context, subject string) (sr.CompatibilityLevel, error) {
	res := c.sr.Compatibility(sr.WithParams(ctx, sr.DefaultToGlobal), subject)[0]
	if _, refused := errors.AsType[*sr.ResponseError](res.Err); res.Err == nil || refused {
		c.answered()
	} else {
		c.failed(res.Err)
	}
	if res.Err != nil {
		return 0, fmt.Errorf("compatibility level of %s: %w", subjectName(subject), c.explain(res.Err))
	}
	return res.Level, nil
}

func subjectName(subject string) string {
	if subject == "" {
		return "the registry"
	}
	return fmt.Sprintf("subject %q", subject)
}

// Ping asks the registry for its global compatibility level, once, without retrying and without
// touching Status (which follows the requests that records wait for): the status page's check
// of whether the registry answers. A refusal (401, 403) is an error too.
func (c *Client) Ping(ctx context.Context) error {
	if res := c.sr.Compatibility(sr.WithParams(ctx, sr.DefaultToGlobal))[0]; res.Err != nil {
		return fmt.Errorf("schema registry: %w", c.explain(res.Err))
	}
	return nil
}

// URL is the registry's base URL (it carries no credentials: Config refuses user info).
func (c *Client) URL() string { return c.url }

// Status returns the registry's reachability as the last requests saw it.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// incompatible builds the *IncompatibleError of a 409, with the subject's compatibility level
// when the registry tells it.
func (c *Client) incompatible(ctx context.Context, subject string, re *sr.ResponseError) error {
	e := &IncompatibleError{Subject: subject, Reason: re.Error(), err: re}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if level, err := c.Compatibility(lctx, subject); err == nil {
		e.Level = level
	}
	return e
}
