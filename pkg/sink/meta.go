package sink

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicMeta is what a metadata request says about one topic.
type topicMeta struct {
	partitions int32
	replicas   int16 // the most replicas of any partition
	err        error // kerr.UnknownTopicOrPartition when the topic does not exist
}

// describeTopics asks the cluster for the topics' metadata with a fresh request. (kadm's
// helpers answer from the client's metadata cache, which keeps "unknown topic" for a few
// seconds after a topic is created.)
func (s *Sink) describeTopics(ctx context.Context, topics []string) (map[string]topicMeta, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return nil, fmt.Errorf("request topic metadata: %w", err)
	}
	out := make(map[string]topicMeta, len(topics))
	for _, rt := range resp.Topics {
		if rt.Topic == nil {
			continue
		}
		m := topicMeta{partitions: int32(len(rt.Partitions)), err: kerr.ErrorForCode(rt.ErrorCode)}
		for _, p := range rt.Partitions {
			m.replicas = max(m.replicas, int16(len(p.Replicas)))
		}
		if m.err == nil {
			for _, p := range rt.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil && perr != kerr.ReplicaNotAvailable {
					m.err = fmt.Errorf("partition %d: %w", p.Partition, perr)
					break
				}
			}
		}
		if m.err == nil && m.partitions == 0 {
			m.err = kerr.LeaderNotAvailable
		}
		out[*rt.Topic] = m
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok {
			out[t] = topicMeta{err: kerr.UnknownTopicOrPartition}
		}
	}
	return out, nil
}
