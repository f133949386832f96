package sink

import (
	"context"
	"time"
)

// The producer's knowledge of idle topics, and why it is dropped.
//
// franz-go keeps, for every topic a client ever produced to, its partitions and their
// leaders, and each metadata refresh asks the broker for all of them: one refresh is
// triggered for each batch that produces to a topic for the first time, and the client
// copies its whole table of topics for each such topic. With 10,000 tables copied, that is a
// refresh of 10,000 topics several times a second while the copies run (each batch of the
// copies waits on one), and 10,000 copies of a table that grows to 10,000 entries: half of
// cdc's CPU, and seconds of delay for every transaction committed meanwhile.
//
// So the sink tells the client to forget topics it has not produced to for a while
// (committed): the refreshes then ask for the tables in use, not every table ever written.
// A topic forgotten and produced to again costs one refresh, as its first record did.
//
// Forgetting is safe only where it cannot change the sequence numbers the broker expects:
// franz-go's documentation warns that producing again to a forgotten topic may meet
// OUT_OF_ORDER_SEQUENCE_NUMBER, because the client starts that partition's sequence at 0
// while the broker remembers the last one of the producer's epoch. Under Kafka's transaction
// version 2 (KIP-890 part 2: Kafka 4.0 and later by default) every committed transaction
// bumps the producer epoch, and the client resets every partition's sequence to 0 for the
// next one: a forgotten topic starts where a remembered one would. The sink checks that this
// is what happens, by the epoch it sees after each commit, and forgets topics only between
// two transactions of that kind, once minBumps commits in a row bumped it (an epoch bumped once
// may be a producer id reloaded after an error, under version 1), on the main producer, in
// exactly-once mode. Otherwise (an
// older broker, at-least-once delivery, whose idempotent producer keeps its epoch) it
// forgets nothing, and refreshes grow with the topics as before.

// purgeEvery is how often, at most, the sink looks for idle topics: a topic is forgotten once
// no record was produced to it for between one and two of these.
const purgeEvery = 5 * time.Second

// minBumps is how many commits in a row must have bumped the producer epoch before topics
// are forgotten.
const minBumps = 3

// purger is the part of *kgo.Client that committed uses.
type purger interface {
	ProducerID(ctx context.Context) (int64, int16, error)
	PurgeTopicsFromProducing(topics ...string)
}

// purgeState is what committed remembers between calls (Run's goroutine writes it).
type purgeState struct {
	// epoch is the producer epoch seen after the last commit (known says one was seen);
	// bumps counts the commits in a row that changed it: transaction version 2.
	epoch int16
	id    int64
	known bool
	bumps int
	// at and gen are when the last look for idle topics was, and the offset tracker's
	// generation then: a topic whose last write is older was idle since.
	at  time.Time
	gen uint64
	// live are the topics written since they were last forgotten: those the client may
	// know (a topic is forgotten once, not at every look).
	live map[string]bool
	// forgotten counts the topics forgotten so far (tests, logs).
	forgotten int
	// every is purgeEvery, and now the clock (tests set both).
	every time.Duration
	now   func() time.Time
}

// committed notes the producer epoch after a commit of the main producer, and forgets the
// topics idle for purgeEvery when the epochs show that each commit starts sequences afresh.
// It runs between two transactions: nothing is buffered, and no record is in flight.
func (s *Sink) committed(ctx context.Context) {
	p, ok := s.prod.(purger)
	if !ok || s.cfg.Delivery != ExactlyOnce {
		return
	}
	s.purgeMu.Lock()
	defer s.purgeMu.Unlock()
	ps := &s.purge
	id, epoch, err := p.ProducerID(ctx)
	if err != nil {
		ps.known, ps.bumps = false, 0
		return
	}
	if ps.known && id == ps.id && epoch != ps.epoch {
		ps.bumps++
	} else {
		ps.bumps = 0
	}
	ps.id, ps.epoch, ps.known = id, epoch, true
	every, now := ps.every, time.Now()
	if every <= 0 {
		every = purgeEvery
	}
	if ps.now != nil {
		now = ps.now()
	}
	if ps.bumps < minBumps || now.Sub(ps.at) < every {
		return
	}
	if ps.live == nil {
		ps.live = make(map[string]bool)
	}
	var idle []string
	ps.gen = s.offsets.sweep(ps.gen, func(topic string, written bool) {
		switch {
		case written:
			ps.live[topic] = true
		case ps.live[topic] && topic != s.cfg.WatermarkTopic:
			idle = append(idle, topic)
			delete(ps.live, topic)
		}
	})
	ps.at = now
	if len(idle) == 0 {
		return
	}
	p.PurgeTopicsFromProducing(idle...)
	ps.forgotten += len(idle)
	s.log.Debug("producer forgot idle topics", "topics", len(idle), "idle_for_at_least", every, "still_known", len(ps.live))
}

// purgeForgotten and purgeBumps are for tests, which read them while Run runs.
func (s *Sink) purgeForgotten() int {
	s.purgeMu.Lock()
	defer s.purgeMu.Unlock()
	return s.purge.forgotten
}

func (s *Sink) purgeBumps() int {
	s.purgeMu.Lock()
	defer s.purgeMu.Unlock()
	return s.purge.bumps
}
