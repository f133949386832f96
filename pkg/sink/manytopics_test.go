package sink

import (
	"fmt"
	"testing"
	"time"
)

// TestEnsureManyTopics: a start-up that needs more topics than the KRaft controller creates in
// one request (10,000 metadata records: here 3,400 topics of one partition and one config, 3
// records each) creates them all, in batches, on a real broker. On c9cb695 one request asked
// for every topic and the controller refused it (POLICY_VIOLATION, "excessively large batch
// operation"), again and again.
func TestEnsureManyTopics(t *testing.T) {
	env := newRealEnv(t)
	cfg := env.config(t, AtLeastOnce)
	cfg.Partitions = 1
	s := env.newSink(t, cfg)
	const n = 3400
	specs := make([]TopicSpec, n)
	names := make([]string, n)
	for i := range specs {
		names[i] = env.topic(fmt.Sprintf("t%05d", i))
		specs[i] = TopicSpec{Name: names[i], Compact: true}
	}
	adm := env.admin(t)
	t.Cleanup(func() {
		for i := 0; i < len(names); i += 500 {
			_, _ = adm.DeleteTopics(t.Context(), names[i:min(i+500, len(names))]...)
		}
	})
	start := time.Now()
	if err := s.EnsureTopics(t.Context(), specs); err != nil {
		t.Fatalf("EnsureTopics of %d topics: %v", n, err)
	}
	t.Logf("%d topics created in %s", n, time.Since(start).Round(time.Millisecond))
	// Each created topic has its partition count from the controller's answer, though the
	// broker may not serve its metadata yet (EnsureTopics does not wait: AwaitLeaders does).
	for _, name := range names {
		if p := s.Partitions(name); p != 1 {
			t.Fatalf("topic %s: %d partitions known after EnsureTopics, want 1", name, p)
		}
	}
	// Once AwaitLeaders returns, their leaders answer for them: a record produced now is not
	// refused as sent to a partition its leader has not made yet.
	waiting := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		k := 0
		for _, name := range names {
			if s.fresh[name] {
				k++
			}
		}
		return k
	}
	if k := waiting(); k != n {
		t.Fatalf("%d topics to wait for after creating %d", k, n)
	}
	s.AwaitLeaders(t.Context(), names)
	if k := waiting(); k != 0 {
		t.Fatalf("%d topics still to wait for once AwaitLeaders returned: the next call would ask again", k)
	}
	td, err := adm.ListTopics(t.Context(), names...)
	if err != nil {
		t.Fatal(err)
	}
	missing := 0
	for _, name := range names {
		if d, ok := td[name]; !ok || d.Err != nil {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d topics missing once AwaitLeaders returned", missing, n)
	}
	ends, err := adm.ListEndOffsets(t.Context(), names...)
	if err != nil {
		t.Fatal(err)
	}
	notLed := 0
	for _, name := range names {
		for _, lo := range ends[name] {
			if lo.Err != nil {
				notLed++
				t.Logf("%s partition %d: %v", name, lo.Partition, lo.Err)
			}
		}
		if len(ends[name]) == 0 {
			notLed++
		}
	}
	if notLed > 0 {
		t.Fatalf("%d of %d new topics' partitions not led once AwaitLeaders returned", notLed, n)
	}
	// Again: every topic exists now, and the second start finds them in bulk.
	start = time.Now()
	if err := s.EnsureTopics(t.Context(), specs); err != nil {
		t.Fatalf("EnsureTopics again: %v", err)
	}
	t.Logf("%d existing topics checked in %s", n, time.Since(start).Round(time.Millisecond))
}
