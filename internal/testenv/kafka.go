package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
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
	prefix := "t" + testsvc.RandomHex(5)
	adm := Admin(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
		defer cancel()
		if err := testsvc.DeleteTopics(ctx, adm, prefix+"."); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return prefix
}
