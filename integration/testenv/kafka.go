package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaTimeout bounds each helper's round trips to Kafka.
const kafkaTimeout = time.Minute

// Admin returns a Kafka admin client for the shared cluster, closed at cleanup.
func Admin(t testing.TB) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(Brokers(t)...))
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// NewTopicPrefix returns a fresh topic prefix ("t" and random hex, no dots) for the test. At
// cleanup every topic named prefix.* is deleted.
func NewTopicPrefix(t testing.TB) string {
	t.Helper()
	prefix := "t" + randomHex(5)
	adm := Admin(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
		defer cancel()
		if err := deleteTopics(ctx, adm, prefix+"."); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return prefix
}

// deleteTopics deletes every topic whose name starts with prefix.
func deleteTopics(ctx context.Context, adm *kadm.Client, prefix string) error {
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	var names []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	resps, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("delete topics %s*: %w", prefix, err)
	}
	if err := resps.Error(); err != nil {
		return fmt.Errorf("delete topics %s*: %w", prefix, err)
	}
	return nil
}
