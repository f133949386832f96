package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/sink"
)

// leaderTopics is a topicControl whose AwaitLeaders takes a while and records how many ran at
// once and in which order.
type leaderTopics struct {
	mu       sync.Mutex
	running  int
	most     int
	order    []string
	ensured  []string
	waitTime time.Duration
}

func (l *leaderTopics) EnsureTopics(_ context.Context, specs []sink.TopicSpec) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ensured = append(l.ensured, specs[0].Name)
	return nil
}

func (l *leaderTopics) AwaitLeaders(_ context.Context, topics []string) {
	l.mu.Lock()
	l.running++
	l.most = max(l.most, l.running)
	l.mu.Unlock()
	time.Sleep(l.waitTime)
	l.mu.Lock()
	l.running--
	l.order = append(l.order, topics[0])
	l.mu.Unlock()
}

func (l *leaderTopics) EndOffsets(string) map[int32]int64 { return nil }

// TestAdministerWaitsForLeadersInTurn: the administrator makes every job's topics without
// waiting for leaders, and one waiter waits for each job's leaders after the previous job's,
// in job order, reporting each job once its leaders answered.
func TestAdministerWaitsForLeadersInTurn(t *testing.T) {
	lt := &leaderTopics{waitTime: 100 * time.Millisecond}
	in := newInbox()
	o := &owner{targets: targets{topics: lt}}
	o.inbox = in
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); o.administer(ctx) }()
	const jobs = 8
	var want []string
	for i := range jobs {
		name := fmt.Sprintf("t%d", i)
		want = append(want, name)
		in.topicJobs <- topicJob{specs: []sink.TopicSpec{{Name: name}}}
	}
	// Every job's topics are made while the first job still waits for its leaders.
	deadline := time.Now().Add(80 * time.Millisecond)
	for {
		lt.mu.Lock()
		ensured := len(lt.ensured)
		lt.mu.Unlock()
		if ensured == jobs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs' topics made while the first waits for leaders: creation waits for leaders", ensured, jobs)
		}
		time.Sleep(time.Millisecond)
	}
	var reported []string
	for range jobs {
		select {
		case ev := <-in.events:
			reported = append(reported, ev.(evTopics).job.specs[0].Name)
		case <-time.After(10 * time.Second):
			t.Fatalf("reported %v, want %d jobs", reported, jobs)
		}
	}
	cancel()
	<-done
	if !slices.Equal(reported, want) || !slices.Equal(lt.order, want) {
		t.Fatalf("leaders awaited in order %v and reported %v, want %v", lt.order, reported, want)
	}
	if lt.most != 1 {
		t.Fatalf("%d waits for leaders at once, want one at a time", lt.most)
	}
}
