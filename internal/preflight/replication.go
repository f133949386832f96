package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/cdc/pkg/sink"
)

// transactionStateTopic is Kafka's internal topic of transaction state (the coordinators' log).
const transactionStateTopic = "__transaction_state"

// replicationFacts is what `cdc check` reads about where Kafka keeps cdc's data: how many
// copies, how many must acknowledge a write, and whether they are in sync now. Zero numbers
// are unknown (a broker setting that the principal may not read).
type replicationFacts struct {
	brokers     int
	configured  int16 // CDC_TOPIC_REPLICATION_FACTOR; -1 is the broker's default
	exactlyOnce bool

	// What a topic created now with the brokers' default gets: replicas (the brokers'
	// default.replication.factor) and min.insync.replicas; brokerSettingsErr when the brokers
	// would not say.
	defaultRF, minISR int
	brokerSettingsErr error

	watermarkTopic string
	topics         []topicReplicas // cdc's existing topics: data topics of the prefix and the watermark topic
	txnLog         *topicReplicas  // nil: not created yet (or not readable)
}

// topicReplicas is one topic's replication as the metadata and its configs say now.
type topicReplicas struct {
	name            string
	replicas        int // fewest replicas of any partition
	minISR          int // the topic's effective min.insync.replicas (0: unknown)
	underReplicated []int32
}

// replicationDoc is where docs/production.md explains the settings the lines below ask for.
const replicationDoc = "docs/production.md#kafka-cluster"

// replication checks that cdc's data, in Kafka, outlives one broker: topics with more than one
// replica on a cluster that has more than one broker, a min.insync.replicas of at least 2 where
// there are 3 replicas or more, and, in exactly-once mode, a transaction state log that is
// replicated and in sync. Data on one replica is a failure (✗); the rest are warnings (!).
func (p *checker) replication(ctx context.Context, cl *kgo.Client, brokers []int32) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	f := readReplicationFacts(ctx, cl, brokers, p.cfg.TopicPrefix, p.cfg.Sink)
	p.replicationLines(f)
}

// readReplicationFacts reads the facts; what it cannot read stays unknown.
func readReplicationFacts(ctx context.Context, cl *kgo.Client, brokers []int32, prefix string, cfg sink.Config) replicationFacts {
	adm := kadm.NewClient(cl)
	f := replicationFacts{brokers: len(brokers), configured: cfg.ReplicationFactor, exactlyOnce: cfg.Delivery == sink.ExactlyOnce,
		watermarkTopic: cfg.WatermarkTopic}
	if f.configured == 0 {
		f.configured = -1
	}
	f.defaultRF, f.minISR, f.brokerSettingsErr = newTopicLayout(ctx, cl, prefix+".__tidemark_check_replication")
	tds, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		return f
	}
	var names []string
	for _, name := range tds.Names() {
		if strings.HasPrefix(name, prefix+".") || name == cfg.WatermarkTopic || name == transactionStateTopic {
			names = append(names, name)
		}
	}
	minISR := map[string]int{}
	if len(names) > 0 {
		if rcs, err := adm.DescribeTopicConfigs(ctx, names...); err == nil {
			for _, rc := range rcs {
				for _, c := range rc.Configs {
					if c.Key == "min.insync.replicas" && c.Value != nil {
						minISR[rc.Name], _ = strconv.Atoi(*c.Value)
					}
				}
			}
		}
	}
	for _, name := range names {
		td := tds[name]
		if td.Err != nil || len(td.Partitions) == 0 {
			continue
		}
		tr := topicReplicas{name: name, replicas: -1, minISR: minISR[name]}
		for _, pd := range td.Partitions.Sorted() {
			if tr.replicas < 0 || len(pd.Replicas) < tr.replicas {
				tr.replicas = len(pd.Replicas)
			}
			if len(pd.ISR) < len(pd.Replicas) {
				tr.underReplicated = append(tr.underReplicated, pd.Partition)
			}
		}
		if name == transactionStateTopic {
			f.txnLog = &tr
			continue
		}
		f.topics = append(f.topics, tr)
	}
	return f
}

// newTopicLayout asks the brokers, without creating anything, what a topic created now with
// the brokers' default replication factor gets: its replicas and min.insync.replicas (0 when the
// principal may not see the topic's configs). A validate-only creation needs only the CREATE that
// cdc has on its prefix; reading the brokers' settings would need DESCRIBE_CONFIGS on the
// cluster, which a least-privilege deployment does not grant.
func newTopicLayout(ctx context.Context, cl *kgo.Client, name string) (replicas, minISR int, err error) {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.ValidateOnly = true
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = name
	rt.NumPartitions = 1
	rt.ReplicationFactor = -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, 0, err
	}
	if len(resp.Topics) != 1 {
		return 0, 0, errors.New("no answer for the validated topic")
	}
	t := resp.Topics[0]
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return 0, 0, err
	}
	for _, c := range t.Configs {
		if c.Name == "min.insync.replicas" && c.Value != nil {
			minISR, _ = strconv.Atoi(*c.Value)
		}
	}
	return int(t.ReplicationFactor), minISR, nil
}

// replicationLines turns the facts into check lines.
func (p *checker) replicationLines(f replicationFacts) {
	p.newTopicReplicas(f)
	p.existingTopicReplicas(f)
	if f.exactlyOnce {
		p.transactionLogReplicas(f)
	}
}

// safeRF is the replication factor the fixes propose on a cluster of n brokers.
func safeRF(n int) int { return min(3, n) }

// newTopicReplicas: what topics cdc creates from now on get.
func (p *checker) newTopicReplicas(f replicationFacts) {
	rf, from := int(f.configured), fmt.Sprintf("CDC_TOPIC_REPLICATION_FACTOR=%d", f.configured)
	if f.configured < 0 {
		rf, from = f.defaultRF, fmt.Sprintf("the brokers' default.replication.factor=%d", f.defaultRF)
	}
	switch {
	case f.configured > 0 && int(f.configured) > f.brokers:
		p.fail(fmt.Sprintf("set CDC_TOPIC_REPLICATION_FACTOR to at most %d, or unset it to use the brokers' default", f.brokers),
			"Kafka: CDC_TOPIC_REPLICATION_FACTOR=%d but the cluster has %d brokers: creating topics fails", f.configured, f.brokers)
	case rf == 0:
		p.pass("Kafka: topics cdc creates get the brokers' default replication factor (the brokers would not say: %v)", f.brokerSettingsErr)
	case rf == 1 && f.brokers > 1:
		fix := fmt.Sprintf("set default.replication.factor=%d on the brokers, or CDC_TOPIC_REPLICATION_FACTOR=%d (see %s)", safeRF(f.brokers), safeRF(f.brokers), replicationDoc)
		if f.configured > 0 {
			fix = fmt.Sprintf("set CDC_TOPIC_REPLICATION_FACTOR=%d, or unset it to use the brokers' default (see %s)", safeRF(f.brokers), replicationDoc)
		}
		p.warn(fix, "Kafka: topics cdc creates would hold their data on one replica (%s) on a cluster of %d brokers: one broker's disk takes them with it", from, f.brokers)
	default:
		p.pass("Kafka: topics cdc creates get %s (%s)", replicasText(rf), from)
	}
	if rf >= 3 && f.minISR > 0 && f.minISR < 2 {
		p.warn(fmt.Sprintf("set min.insync.replicas=2 on the brokers (see %s)", replicationDoc),
			"Kafka: the brokers' min.insync.replicas=%d with %d replicas: a write that only the leader holds counts as acknowledged, and is lost when that broker dies before a follower copies it", f.minISR, rf)
	}
}

// existingTopicReplicas: cdc's topics as they are.
func (p *checker) existingTopicReplicas(f replicationFacts) {
	if len(f.topics) == 0 {
		return
	}
	var single, lowISR, under []string
	lo, hi, dataMax, wmReplicas := -1, 0, 0, -1
	for _, t := range f.topics {
		if lo < 0 || t.replicas < lo {
			lo = t.replicas
		}
		hi = max(hi, t.replicas)
		if t.name == f.watermarkTopic {
			wmReplicas = t.replicas
		} else {
			dataMax = max(dataMax, t.replicas)
		}
		if t.replicas == 1 && f.brokers > 1 {
			single = append(single, t.name)
		}
		if t.replicas >= 3 && t.minISR > 0 && t.minISR < 2 {
			lowISR = append(lowISR, fmt.Sprintf("%s (min.insync.replicas=%d)", t.name, t.minISR))
		}
		for _, part := range t.underReplicated {
			under = append(under, fmt.Sprintf("%s[%d]", t.name, part))
		}
	}
	bad := false
	if len(single) > 0 {
		bad = true
		p.fail(fmt.Sprintf("raise their replication factor to %d with kafka-reassign-partitions (a plan naming %d brokers per partition, --execute), then check with kafka-topics --describe; see %s",
			safeRF(f.brokers), safeRF(f.brokers), replicationDoc),
			"Kafka: %d of cdc's %d topics hold their data on one replica on a cluster of %d brokers: %s", len(single), len(f.topics), f.brokers, firstFew(single))
	}
	if len(lowISR) > 0 {
		bad = true
		p.warn(fmt.Sprintf("kafka-configs --alter --entity-type topics --entity-name <topic> --add-config min.insync.replicas=2 for each (see %s)", replicationDoc),
			"Kafka: %d of cdc's topics have 3 or more replicas but accept a write that only the leader holds: %s", len(lowISR), firstFew(lowISR))
	}
	if wmReplicas > 0 && wmReplicas < dataMax {
		bad = true
		p.warn(fmt.Sprintf("raise its replication factor to %d with kafka-reassign-partitions (see %s)", dataMax, replicationDoc),
			"Kafka: the watermark topic %s has %d replicas, fewer than the data topics' %d: losing it loses every table's resume point", f.watermarkTopic, wmReplicas, dataMax)
	}
	if len(under) > 0 {
		bad = true
		p.warn("find the broker that is down or behind (kafka-topics --describe --under-replicated-partitions) and bring it back",
			"Kafka: %d partitions of cdc's topics are under-replicated now (fewer in-sync replicas than replicas): %s", len(under), firstFew(under))
	}
	if !bad {
		span := replicasText(lo)
		if lo != hi {
			span = fmt.Sprintf("%d to %d replicas", lo, hi)
		}
		p.pass("Kafka: cdc's %d existing topics have %s, all in sync", len(f.topics), span)
	}
}

// transactionLogReplicas: the transaction state log, which holds every open transaction of
// exactly-once mode and where its coordinator is.
func (p *checker) transactionLogReplicas(f replicationFacts) {
	fix := fmt.Sprintf("set transaction.state.log.replication.factor=%d and transaction.state.log.min.isr=2 on the brokers; an existing %s is raised with kafka-reassign-partitions (see %s)",
		safeRF(f.brokers), transactionStateTopic, replicationDoc)
	t := f.txnLog
	if t == nil {
		return // not created yet, or not visible to the principal
	}
	txnMinISR := t.minISR // the topic's own, set from transaction.state.log.min.isr at creation
	switch {
	case t.replicas == 1 && f.brokers > 1:
		p.fail(fix, "Kafka: the transaction state log (%s) has one replica on a cluster of %d brokers: when that broker is lost, so are the transactions it coordinates, and exactly-once stops", transactionStateTopic, f.brokers)
	case len(t.underReplicated) > 0:
		p.warn("find the broker that is down or behind (kafka-topics --describe --under-replicated-partitions) and bring it back",
			"Kafka: the transaction state log (%s) is under-replicated now: %d of its partitions have fewer in-sync replicas than replicas", transactionStateTopic, len(t.underReplicated))
	case t.replicas >= 3 && txnMinISR > 0 && txnMinISR < 2:
		p.warn(fix, "Kafka: the transaction state log (%s) has %d replicas but min.insync.replicas=%d: a commit that only one broker holds counts as written", transactionStateTopic, t.replicas, txnMinISR)
	default:
		p.pass("Kafka: the transaction state log (%s) has %s, all in sync", transactionStateTopic, replicasText(t.replicas))
	}
}

// firstFew names the first few items, and how many more.
func firstFew(items []string) string {
	items = slices.Clone(items)
	slices.Sort(items)
	const show = 5
	if len(items) <= show {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:show], ", "), len(items)-show)
}

// replicasText is "1 replica" or "n replicas".
func replicasText(n int) string {
	if n == 1 {
		return "1 replica"
	}
	return strconv.Itoa(n) + " replicas"
}
