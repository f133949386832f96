package sink

import (
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestWatermarkTopicReplicas checks that a watermark topic created beside existing data topics
// gets at least their replication factor, whatever the configured one, and that the broker's
// default (-1) is otherwise left to the broker. (kfake's default for -1 is min(3, brokers).)
func TestWatermarkTopicReplicas(t *testing.T) {
	for _, tc := range []struct {
		name       string
		existing   int16 // replication factor of an existing data topic (0: none)
		configured int16
		want       int
	}{
		{"configured 1, data topic of 3", 3, 1, 3},
		{"configured 2, data topic of 3", 3, 2, 3},
		{"broker default, data topic of 2", 2, -1, 2},
		{"broker default, data topic of 1", 1, -1, 3},
		{"configured 3, data topic of 1", 1, 3, 3},
		{"configured 1, no data topic", 0, 1, 1},
		{"broker default, no data topic", 0, -1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(3))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			env := &testEnv{brokers: c.ListenAddrs(), prefix: uniquePrefix(t)}
			adm := env.admin(t)
			data := env.topic("data")
			if tc.existing > 0 {
				configs := map[string]*string{"cleanup.policy": new("compact"), "max.message.bytes": new(strconv.Itoa(MaxRecordBytes))}
				if _, err := adm.CreateTopic(t.Context(), 1, tc.existing, configs, data); err != nil {
					t.Fatal(err)
				}
			}
			cfg := env.config(t, AtLeastOnce)
			cfg.ReplicationFactor = tc.configured
			s := env.newSink(t, cfg)
			if err := s.EnsureTopics(t.Context(), []TopicSpec{{Name: data, Compact: true}}); err != nil {
				t.Fatalf("EnsureTopics: %v", err)
			}
			tds, err := adm.ListTopics(t.Context(), cfg.WatermarkTopic)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(tds[cfg.WatermarkTopic].Partitions[0].Replicas); got != tc.want {
				t.Errorf("watermark topic has %d replicas, want %d", got, tc.want)
			}
		})
	}
}
