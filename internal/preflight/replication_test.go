package preflight

import (
	"strings"
	"testing"
)

// TestReplicationLines checks the rules of `cdc check` about where Kafka keeps cdc's data:
// each case names the marks and texts its lines must show, and texts that must not appear.
func TestReplicationLines(t *testing.T) {
	safe := func(f replicationFacts) replicationFacts {
		f.brokers, f.configured, f.exactlyOnce = 3, -1, true
		f.defaultRF, f.minISR = 3, 2
		f.watermarkTopic = "tm.__watermarks"
		f.topics = []topicReplicas{{name: "tm.public.a", replicas: 3, minISR: 2}, {name: "tm.__watermarks", replicas: 3, minISR: 2}}
		f.txnLog = &topicReplicas{name: transactionStateTopic, replicas: 3, minISR: 2}
		return f
	}
	for _, tc := range []struct {
		name   string
		facts  replicationFacts
		want   []string // "mark text" fragments, each in some line
		absent []string
	}{
		{name: "production cluster", facts: safe(replicationFacts{}),
			want:   []string{"✓ Kafka: topics cdc creates get 3 replicas (the brokers' default.replication.factor=3)", "✓ Kafka: cdc's 2 existing topics have 3 replicas, all in sync", "✓ Kafka: the transaction state log (__transaction_state) has 3 replicas"},
			absent: []string{"!", "✗"}},
		{name: "single broker", facts: replicationFacts{brokers: 1, configured: -1, exactlyOnce: true, defaultRF: 1, minISR: 1,
			topics: []topicReplicas{{name: "tm.public.a", replicas: 1, minISR: 1}}, txnLog: &topicReplicas{name: transactionStateTopic, replicas: 1, minISR: 1}},
			want:   []string{"✓ Kafka: topics cdc creates get 1 replica", "✓ Kafka: cdc's 1 existing topics have 1 replica"},
			absent: []string{"!", "✗"}},
		{name: "broker default 1 on three brokers", facts: func() replicationFacts { f := safe(replicationFacts{}); f.defaultRF = 1; return f }(),
			want: []string{"! Kafka: topics cdc creates would hold their data on one replica (the brokers' default.replication.factor=1) on a cluster of 3 brokers",
				"fix: set default.replication.factor=3 on the brokers, or CDC_TOPIC_REPLICATION_FACTOR=3"}},
		{name: "configured 1 on three brokers", facts: func() replicationFacts { f := safe(replicationFacts{}); f.configured = 1; return f }(),
			want: []string{"! Kafka: topics cdc creates would hold their data on one replica (CDC_TOPIC_REPLICATION_FACTOR=1)", "fix: set CDC_TOPIC_REPLICATION_FACTOR=3, or unset it"}},
		{name: "configured above the brokers", facts: func() replicationFacts { f := safe(replicationFacts{}); f.configured = 5; return f }(),
			want: []string{"✗ Kafka: CDC_TOPIC_REPLICATION_FACTOR=5 but the cluster has 3 brokers"}},
		{name: "existing topics of one replica", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.topics = []topicReplicas{{name: "tm.public.a", replicas: 1, minISR: 2}, {name: "tm.public.b", replicas: 1, minISR: 2}, {name: "tm.__watermarks", replicas: 1, minISR: 2}}
			return f
		}(),
			want: []string{"✗ Kafka: 3 of cdc's 3 topics hold their data on one replica on a cluster of 3 brokers: tm.__watermarks, tm.public.a, tm.public.b",
				"fix: raise their replication factor to 3 with kafka-reassign-partitions"},
			absent: []string{"existing topics have"}},
		{name: "min.insync.replicas 1 with 3 replicas", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.minISR = 1
			f.topics[0].minISR = 1
			return f
		}(),
			want: []string{"! Kafka: the brokers' min.insync.replicas=1 with 3 replicas", "fix: set min.insync.replicas=2 on the brokers",
				"! Kafka: 1 of cdc's topics have 3 or more replicas but accept a write that only the leader holds: tm.public.a (min.insync.replicas=1)",
				"--add-config min.insync.replicas=2"}},
		{name: "min.insync.replicas 1 with 2 replicas is not flagged", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.brokers, f.defaultRF, f.minISR = 2, 2, 1
			f.topics = []topicReplicas{{name: "tm.public.a", replicas: 2, minISR: 1}}
			return f
		}(),
			want: []string{"✓ Kafka: topics cdc creates get 2 replicas"}, absent: []string{"min.insync.replicas=1"}},
		{name: "watermark topic below the data topics", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.topics[1].replicas = 2
			return f
		}(),
			want: []string{"! Kafka: the watermark topic tm.__watermarks has 2 replicas, fewer than the data topics' 3"}},
		{name: "under-replicated partitions", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.topics[0].underReplicated = []int32{0, 2}
			return f
		}(),
			want: []string{"! Kafka: 2 partitions of cdc's topics are under-replicated now", "tm.public.a[0], tm.public.a[2]"}},
		{name: "transaction state log of one replica", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.txnLog.replicas = 1
			return f
		}(),
			want: []string{"✗ Kafka: the transaction state log (__transaction_state) has one replica on a cluster of 3 brokers",
				"fix: set transaction.state.log.replication.factor=3 and transaction.state.log.min.isr=2"}},
		{name: "transaction state log under-replicated", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.txnLog.underReplicated = []int32{1}
			return f
		}(),
			want: []string{"! Kafka: the transaction state log (__transaction_state) is under-replicated now: 1 of its partitions"}},
		{name: "transaction state log min isr 1", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.txnLog.minISR = 1
			return f
		}(),
			want: []string{"! Kafka: the transaction state log (__transaction_state) has 3 replicas but min.insync.replicas=1"}},
		{name: "transaction state log not visible", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.txnLog = nil
			return f
		}(),
			absent: []string{"__transaction_state"}},
		{name: "at-least-once ignores the transaction state log", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.exactlyOnce = false
			f.txnLog.replicas = 1
			return f
		}(),
			absent: []string{"__transaction_state"}},
		{name: "broker settings unreadable", facts: func() replicationFacts {
			f := safe(replicationFacts{})
			f.defaultRF, f.minISR = 0, 0
			return f
		}(),
			want: []string{"✓ Kafka: topics cdc creates get the brokers' default replication factor (the brokers would not say"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &checker{}
			p.replicationLines(tc.facts)
			out := renderLines(p.lines)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("missing %q in:\n%s", w, out)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(out, a) {
					t.Errorf("unexpected %q in:\n%s", a, out)
				}
			}
		})
	}
}

// renderLines prints lines as Run does.
func renderLines(lines []checkLine) string {
	var b strings.Builder
	writeLines(&b, lines)
	return b.String()
}
