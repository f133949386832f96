package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicSpec describes a data topic. Topics of keyless tables must not be compacted: a compacted
// topic refuses records without a key.
type TopicSpec struct {
	Name    string
	Compact bool
}

// topicWant is what EnsureTopics creates when a topic is missing.
type topicWant struct {
	compact    bool
	partitions int32 // -1: the broker's default
	// segments: the topic gets WatermarkSegmentConfigs (the watermark topic).
	segments bool
}

// Segment settings of the watermark topic. Kafka never compacts a partition's active segment,
// and by default a segment rolls only at 1 GiB or after 7 days: a watermark topic written a few
// times a second keeps every record of the last days there, and the restart reads them all. With
// these the active segment rolls within an hour or 32 MiB, whichever comes first, and the
// cleaner compacts what rolled (the compacted part is one record per key, so a rolled segment
// puts the dirty ratio far above min.cleanable.dirty.ratio's default of 0.5, which stays). A
// restart then reads at most about one segment besides one record per key. segment.bytes is
// twice MaxRecordBytes, the largest record batch the producer writes: a segment must hold one.
// delete.retention.ms keeps Kafka's default (1 day): a reader that starts from the beginning
// has that long to see a tombstone.
const (
	WatermarkSegmentMS    = 60 * 60 * 1000
	WatermarkSegmentBytes = 2 * MaxRecordBytes
)

// watermarkSegmentConfigs are the watermark topic's segment settings as topic configs.
func watermarkSegmentConfigs() map[string]int64 {
	return map[string]int64{"segment.ms": WatermarkSegmentMS, "segment.bytes": WatermarkSegmentBytes}
}

// EnsureTopics creates the missing topics of specs and the watermark topic, with the
// configured partitions and replication factor (cleanup.policy=compact where Compact; the
// watermark topic is compacted with one partition and the segment settings
// WatermarkSegmentMS and WatermarkSegmentBytes) and max.message.bytes=MaxRecordBytes. Existing
// topics are accepted as they are and their real partition counts remembered, except that an
// existing topic of a keyless table that is compacted is an error, and that an existing
// watermark topic that inherits larger segment settings gets them (tuneSegments). Finally the
// next offsets of every topic are seeded with the topic's current end offsets.
//
// It returns once the controller created the missing topics: a data topic created now may not
// be served by its broker yet (its partition count is the controller's answer). Produce to
// such topics after AwaitLeaders, which waits for their leaders. The watermark topic is
// served when EnsureTopics returns.
//
// A data topic the broker refuses to create for good (an invalid or colliding name, a policy),
// or an existing one that does not fit (compacted for a keyless table) is left out and named in
// the TopicErrors returned, with the broker's reason; the other topics are ready then. Any other
// error (the broker unreachable, a retriable refusal, the watermark topic) is for the call as a
// whole.
func (s *Sink) EnsureTopics(ctx context.Context, specs []TopicSpec) error {
	wants, err := s.topicWants(specs)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(wants))
	for name := range wants {
		names = append(names, name)
	}
	slices.Sort(names)

	metas, err := s.describeTopics(ctx, names)
	if err != nil {
		return err
	}
	var missing, existing []string
	// dataReplicas: the most replicas of an existing data topic, which a watermark topic
	// created now gets at least.
	var dataReplicas int16
	for _, name := range names {
		switch m := metas[name]; {
		case errors.Is(m.err, kerr.UnknownTopicOrPartition):
			missing = append(missing, name)
		case m.err != nil && !kerr.IsRetriable(m.err):
			return fmt.Errorf("describe topic %s: %w", name, m.err)
		default:
			existing = append(existing, name)
			if name != s.cfg.WatermarkTopic {
				dataReplicas = max(dataReplicas, m.replicas)
			}
		}
	}
	failed := TopicErrors{}
	created, err := s.createTopics(ctx, missing, wants, dataReplicas, failed)
	if err != nil {
		return err
	}
	if err := s.checkExisting(ctx, existing, wants, failed); err != nil {
		return err
	}
	if err := failed[s.cfg.WatermarkTopic]; err != nil {
		return err
	}
	names = slices.DeleteFunc(names, func(name string) bool { return failed[name] != nil })
	// A data topic created just now has the partitions the controller answered with; the
	// broker may not serve its metadata yet, but nothing produces to it before AwaitLeaders,
	// which waits for its leaders. Not waiting here lets the next batch of topics be created
	// while the broker makes this one's partitions.
	load := slices.DeleteFunc(slices.Clone(names), func(name string) bool {
		return created[name] && name != s.cfg.WatermarkTopic && s.Partitions(name) > 0
	})
	if err := s.loadPartitions(ctx, load); err != nil {
		return err
	}
	if err := s.seedOffsets(ctx, names, created); err != nil {
		return err
	}
	if len(failed) > 0 {
		s.log.Warn("topics cannot be used: their tables fail", "count", len(failed), "first", firstError(failed))
		return failed
	}
	return nil
}

// TopicErrors are the topics that EnsureTopics could not make or accept, by name, each with the
// broker's reason: permanent errors of those topics alone.
type TopicErrors map[string]error

func (e TopicErrors) Error() string {
	names := slices.Sorted(maps.Keys(e))
	return fmt.Sprintf("%d topic(s) cannot be used, the first: %v", len(names), e[names[0]])
}

// seedOffsets seeds the next offsets of names with their current end offsets.
func (s *Sink) seedOffsets(ctx context.Context, names []string, created map[string]bool) error {
	// A topic created just now ends at offset 0 in every partition. Asking the broker would wait
	// for the new partitions' leaders: 12 s for 1,000 new topics on the shared test broker. (The
	// seed only ever raises what the sink knows.)
	var list []string
	for _, name := range names {
		if !created[name] {
			list = append(list, name)
			continue
		}
		zero := make(map[int32]int64)
		for p := range s.Partitions(name) {
			zero[p] = 0
		}
		s.offsets.seed(name, zero)
	}
	if len(list) == 0 {
		return nil
	}
	ends, err := s.admin.ListEndOffsets(ctx, list...)
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	for topic, parts := range ends {
		m := make(map[int32]int64, len(parts))
		for p, lo := range parts {
			m[p] = lo.Offset
		}
		s.offsets.seed(topic, m)
	}
	return nil
}

// topicWants merges specs with the watermark topic, refusing contradictions.
func (s *Sink) topicWants(specs []TopicSpec) (map[string]topicWant, error) {
	partitions := s.cfg.Partitions
	if partitions == 0 {
		partitions = -1
	}
	wants := map[string]topicWant{s.cfg.WatermarkTopic: {compact: true, partitions: 1, segments: true}}
	var errs []error
	for _, spec := range specs {
		if spec.Name == "" {
			errs = append(errs, errors.New("topic spec without a name"))
			continue
		}
		if spec.Name == s.cfg.WatermarkTopic {
			// Asking for the watermark topic itself (compacted) is asking for what is already
			// wanted: one partition, whatever the data topics' partition count.
			if !spec.Compact {
				errs = append(errs, fmt.Errorf("topic %s is both a data topic and the watermark topic", spec.Name))
			}
			continue
		}
		w := topicWant{compact: spec.Compact, partitions: partitions}
		if prev, ok := wants[spec.Name]; ok && prev != w {
			errs = append(errs, fmt.Errorf("topic %s is listed twice, compacted and not compacted", spec.Name))
			continue
		}
		wants[spec.Name] = w
	}
	return wants, errors.Join(errs...)
}

// createTopics creates the missing topics in batches the controller accepts, and returns those
// it created. A topic that appeared in the meantime (TOPIC_ALREADY_EXISTS) is fine; one the
// broker refuses for good is added to failed.
//
// The watermark topic gets at least dataReplicas replicas, the most of an existing data topic:
// it is what a restart resumes from, so it must not be the first thing a broker's disk takes
// with it. (Data topics created together with it get the same replication factor anyway.)
//
// KRaft refuses a request whose topics make more metadata records than it takes in one
// operation (POLICY_VIOLATION, "excessively large batch operation": 10,000 records, each topic
// one plus one per partition plus one per config). Batches are sized to a quarter of that; a
// batch refused as too large anyway (a lower limit) is split in two and tried again.
func (s *Sink) createTopics(ctx context.Context, missing []string, wants map[string]topicWant, dataReplicas int16, failed TopicErrors) (map[string]bool, error) {
	created := make(map[string]bool)
	groups := make(map[topicWant][]string)
	for _, name := range missing {
		groups[wants[name]] = append(groups[wants[name]], name)
	}
	rf := s.cfg.ReplicationFactor
	if rf == 0 {
		rf = -1
	}
	var errs []error
	for _, w := range slices.SortedFunc(maps.Keys(groups), func(a, b topicWant) int { return cmp.Compare(len(groups[a]), len(groups[b])) }) {
		topics := groups[w]
		rf := rf
		// -1 (the broker's default) gives way to data topics of more than one replica: they may
		// have been created under another default, or by hand. (It may then stay below a
		// higher broker default, but never below the data.)
		if w.segments && (rf > 0 && rf < dataReplicas || rf < 0 && dataReplicas > 1) {
			s.log.Info("creating the watermark topic with the data topics' replication factor", "topic", s.cfg.WatermarkTopic,
				"replication_factor", dataReplicas, "configured", rf)
			rf = dataReplicas
		}
		configs := map[string]*string{"max.message.bytes": new(strconv.Itoa(MaxRecordBytes))}
		if w.compact {
			configs["cleanup.policy"] = new("compact")
		}
		if w.segments {
			for k, v := range watermarkSegmentConfigs() {
				configs[k] = new(strconv.FormatInt(v, 10))
			}
		}
		parts := int(w.partitions)
		if parts <= 0 {
			parts = 12 // the broker's default, unknown here: assume a generous one
		}
		size := max(1, min(createBatchTopics, createBatchRecords/(1+parts+len(configs))))
		for len(topics) > 0 {
			batch := topics[:min(size, len(topics))]
			done, err := s.createBatch(ctx, w, rf, configs, batch, created, failed)
			switch {
			case errors.Is(err, errBatchTooLarge) && len(batch) > 1:
				size = max(1, len(batch)/2)
				s.log.Info("the controller refused a batch of topics as too large: creating them in smaller ones", "topics", len(batch), "now", size)
				continue
			case err != nil:
				errs = append(errs, err)
			}
			topics = topics[len(batch):]
			if len(missing) > size {
				s.log.Info("creating topics in batches", "done", len(created), "of", len(missing), "batch", len(batch), "created_in_batch", done)
			}
		}
	}
	return created, errors.Join(errs...)
}

// createBatchRecords and createBatchTopics bound one CreateTopics request: the metadata records
// its topics make (KRaft's limit for one operation is 10,000), and the topics.
const (
	createBatchRecords = 2500
	createBatchTopics  = 500
)

// errBatchTooLarge: the controller refused a request for the records its topics make.
var errBatchTooLarge = errors.New("batch too large for the controller")

// createBatch creates topics in one request and adds those it created to created; it returns
// how many. It returns errBatchTooLarge when the controller refused the request for its size.
// A topic refused with an error that is not retriable is added to failed.
func (s *Sink) createBatch(ctx context.Context, w topicWant, rf int16, configs map[string]*string, topics []string, created map[string]bool, failed TopicErrors) (int, error) {
	resps, err := s.admin.CreateTopics(ctx, w.partitions, rf, configs, topics...)
	if err != nil {
		return 0, fmt.Errorf("create %d topics (%s...): %w", len(topics), topics[0], err)
	}
	var errs []error
	n, tooLarge := 0, 0
	for _, name := range topics {
		r, ok := resps[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("create topic %s: no answer from the broker", name))
		case r.Err == nil:
			created[name] = true
			if name != s.cfg.WatermarkTopic { // the owner's topic jobs never name it
				s.mu.Lock()
				s.fresh[name] = true
				s.mu.Unlock()
				if r.NumPartitions > 0 {
					s.setPartitions(name, r.NumPartitions)
				}
			}
			n++
			s.log.Debug("created topic", "topic", name, "partitions", r.NumPartitions, "replication_factor", r.ReplicationFactor, "compacted", w.compact)
		case errors.Is(r.Err, kerr.TopicAlreadyExists):
		case errors.Is(r.Err, kerr.PolicyViolation) && strings.Contains(r.ErrMessage, "large batch"):
			tooLarge++
		default:
			msg := ""
			if r.ErrMessage != "" {
				msg = " (" + r.ErrMessage + ")"
			}
			err := fmt.Errorf("create topic %s: %w%s", name, r.Err, msg)
			if kerr.IsRetriable(r.Err) {
				errs = append(errs, err)
			} else {
				failed[name] = err
			}
		}
	}
	if tooLarge == len(topics) {
		return 0, errBatchTooLarge
	}
	if n > 0 {
		var first []string
		for _, name := range topics {
			if created[name] && len(first) < 3 {
				first = append(first, name)
			}
		}
		s.log.Info("created topics", "count", n, "first", first, "partitions", w.partitions, "compacted", w.compact)
	}
	return n, errors.Join(errs...)
}

// checkExisting compares existing topics' cleanup policy with what is wanted; a topic that does
// not fit is added to failed.
func (s *Sink) checkExisting(ctx context.Context, existing []string, wants map[string]topicWant, failed TopicErrors) error {
	if len(existing) == 0 {
		return nil
	}
	rcs, err := s.admin.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return fmt.Errorf("describe topic configs: %w", err)
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			return fmt.Errorf("describe config of topic %s: %w", rc.Name, rc.Err)
		}
		compacted := false
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
				compacted = true
			}
			if c.Key == "max.message.bytes" && c.Value != nil {
				if n, err := strconv.Atoi(*c.Value); err == nil && n < MaxRecordBytes {
					s.log.Warn("existing topic accepts smaller records than the sink may produce: rows whose record exceeds it fail with MESSAGE_TOO_LARGE; raise max.message.bytes on the topic",
						"topic", rc.Name, "max_message_bytes", n, "want", MaxRecordBytes)
				}
			}
		}
		want := wants[rc.Name]
		if want.segments {
			s.tuneSegments(ctx, rc)
		}
		switch {
		case compacted == want.compact:
		case compacted:
			failed[rc.Name] = fmt.Errorf("topic %s is compacted but its table has no key (a compacted topic refuses null keys): set cleanup.policy=delete on it or delete the topic", rc.Name)
		default:
			s.log.Warn("existing topic is not compacted: old versions of a key stay until retention removes them", "topic", rc.Name)
		}
	}
	return nil
}

// firstError is the error of failed's first topic by name, for a log line.
func firstError(failed TopicErrors) error {
	return failed[slices.Min(slices.Collect(maps.Keys(failed)))]
}

// tuneSegments gives an existing watermark topic the segment settings it would get if it were
// created now, where it inherits a larger value from the broker; a value set on the topic
// itself is the operator's choice and is left alone, with a warning when it is larger. When
// the broker refuses the change (no ALTER_CONFIGS permission on the topic), the warning says
// what to set; the service goes on either way, since compaction only bounds start-up time.
func (s *Sink) tuneSegments(ctx context.Context, rc kadm.ResourceConfig) {
	var set []kadm.AlterConfig
	for _, key := range slices.Sorted(maps.Keys(watermarkSegmentConfigs())) {
		want := watermarkSegmentConfigs()[key]
		i := slices.IndexFunc(rc.Configs, func(c kadm.Config) bool { return c.Key == key })
		if i < 0 {
			set = append(set, kadm.AlterConfig{Op: kadm.SetConfig, Name: key, Value: new(strconv.FormatInt(want, 10))})
			continue
		}
		c := rc.Configs[i]
		got, err := strconv.ParseInt(deref(c.Value), 10, 64)
		if err == nil && got <= want {
			continue
		}
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
			s.log.Warn("the watermark topic sets a larger segment than cdc would: its active segment, which Kafka never compacts, grows larger, and start-up reads all of it",
				"topic", rc.Name, "config", key, "value", deref(c.Value), "cdc_would_set", want)
			continue
		}
		set = append(set, kadm.AlterConfig{Op: kadm.SetConfig, Name: key, Value: new(strconv.FormatInt(want, 10))})
	}
	if len(set) == 0 {
		return
	}
	names := make([]string, len(set))
	for i, a := range set {
		names[i] = a.Name + "=" + *a.Value
	}
	resps, err := s.admin.AlterTopicConfigs(ctx, set, rc.Name)
	if err == nil {
		_, err = resps.On(rc.Name, func(r *kadm.AlterConfigsResponse) error { return r.Err })
	}
	if err != nil {
		s.log.Warn("could not set the watermark topic's segment settings, so compaction can reach its records; set them on the topic (kafka-configs --alter --add-config)",
			"topic", rc.Name, "configs", strings.Join(names, ","), "err", err)
		return
	}
	s.log.Info("set the watermark topic's segment settings so that compaction can reach its records", "topic", rc.Name, "configs", strings.Join(names, ","))
}

// deref returns *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// loadPartitions remembers the real partition count of every topic. Right after a create the
// metadata may not list a topic yet, so this retries for up to topicMetadataWait: a broker under
// load can take seconds to propagate a new topic (50 tries 100 ms apart ran out on the loaded
// test broker).
func (s *Sink) loadPartitions(ctx context.Context, names []string) error {
	deadline := time.Now().Add(topicMetadataWait)
	pending := names
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		metas, err := s.describeTopics(ctx, pending)
		if err != nil {
			return err
		}
		var next []string
		var lastErr error
		for _, name := range pending {
			if m := metas[name]; m.err != nil {
				next = append(next, name)
				lastErr = fmt.Errorf("topic %s: %w", name, m.err)
				continue
			}
			s.setPartitions(name, metas[name].partitions)
		}
		if len(next) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait for topic metadata (%s): %w", topicMetadataWait, lastErr)
		}
		pending = next
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for topic metadata: %w", ctx.Err())
		case <-time.After(pause):
		}
	}
}

// AwaitLeaders waits until the leaders of topics answer for their partitions (ListOffsets), for
// at most topicMetadataWait, before producing to them. Only topics EnsureTopics created and whose
// leaders were not seen answering yet are waited for: any other topic returns at once. A broker names a new partition's leader in its metadata before that leader has made
// the partition's log; a record produced meanwhile is refused and retried by the producer after
// a metadata refresh (250 ms or more), and holds up its whole transaction, with every other
// table's records in it: while 10,000 new tables hydrated, such retries were most of the time a
// busy table's changes waited. A topic still not led after the wait is left to the producer's
// retries (logged), not failed. It does not hold up EnsureTopics: the broker makes the next
// topics meanwhile.
func (s *Sink) AwaitLeaders(ctx context.Context, topics []string) {
	s.mu.Lock()
	topics = slices.DeleteFunc(slices.Clone(topics), func(name string) bool { return !s.fresh[name] })
	s.mu.Unlock()
	if len(topics) == 0 {
		return
	}
	defer func() {
		s.mu.Lock()
		for _, name := range topics {
			delete(s.fresh, name)
		}
		s.mu.Unlock()
	}()
	start := time.Now()
	pending := topics
	var lastErr error
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		ends, err := s.admin.ListEndOffsets(ctx, pending...)
		var next []string
		for _, name := range pending {
			parts, ok := ends[name]
			ready := err == nil && ok && len(parts) > 0
			for _, lo := range parts {
				if lo.Err != nil {
					ready, lastErr = false, fmt.Errorf("topic %s partition %d: %w", name, lo.Partition, lo.Err)
				}
			}
			if !ready {
				next = append(next, name)
			}
		}
		if err != nil {
			lastErr = err
		}
		if len(next) == 0 {
			if waited := time.Since(start); waited > time.Second {
				s.log.Info("new topics' partitions are led", "topics", len(topics), "waited", waited.Round(time.Millisecond).String())
			}
			return
		}
		if time.Since(start) > topicMetadataWait || ctx.Err() != nil {
			s.log.Warn("new topics' partitions not led yet: their first records will wait for the broker", "topics", len(next), "of", len(topics), "waited", time.Since(start).Round(time.Millisecond).String(), "err", lastErr)
			return
		}
		pending = next
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// topicMetadataWait bounds how long loadPartitions waits for the metadata of topics it created.
const topicMetadataWait = time.Minute
