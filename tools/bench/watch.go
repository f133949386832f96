package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/wait"
	"github.com/tidemark/cdc/pkg/watermark"
)

// watcher follows a watermark topic in the background (pkg/wait) and remembers, per export,
// the latest record and when each state was first seen.
type watcher struct {
	w      *wait.Waiter
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	latest  map[change.ExportID]watermark.Record
	seen    map[stateKey]time.Time // first observation of each (export, state)
	err     error
	changed chan struct{} // closed and replaced on every update
}

type stateKey struct {
	export change.ExportID
	state  watermark.State
}

func startWatcher(brokers []string, topic string) (*watcher, error) {
	w, err := wait.New(brokers, topic)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	wt := &watcher{
		w: w, cancel: cancel, done: make(chan struct{}),
		latest:  make(map[change.ExportID]watermark.Record),
		seen:    make(map[stateKey]time.Time),
		changed: make(chan struct{}),
	}
	go wt.loop(ctx)
	return wt, nil
}

func (wt *watcher) loop(ctx context.Context) {
	defer close(wt.done)
	for {
		err := wt.w.Poll(ctx)
		now := time.Now()
		if ctx.Err() != nil {
			return
		}
		wt.mu.Lock()
		if err != nil {
			wt.err = err
		} else {
			for e, r := range wt.w.Latest() {
				wt.latest[e] = r
				k := stateKey{e, r.State}
				if _, ok := wt.seen[k]; !ok {
					wt.seen[k] = now
				}
			}
		}
		close(wt.changed)
		wt.changed = make(chan struct{})
		wt.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// watchCDC waits until cdc (p) has created its watermark topic, then follows it.
func (b *bench) watchCDC(ctx context.Context, p *cdcProc, topic string) (*watcher, error) {
	return b.watchCDCOn(ctx, b.k, b.svc.brokers, p, topic)
}

// watchCDCOn is watchCDC on another Kafka cluster, whose client is k.
func (b *bench) watchCDCOn(ctx context.Context, k *kafkaClient, brokers []string, p *cdcProc, topic string) (*watcher, error) {
	if err := k.waitTopic(ctx, topic, p.check); err != nil {
		return nil, err
	}
	return startWatcher(brokers, topic)
}

// close stops the watcher.
func (wt *watcher) close() {
	wt.cancel()
	<-wt.done
	wt.w.Close()
}

// snapshot returns the latest records.
func (wt *watcher) snapshot() map[change.ExportID]watermark.Record {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	out := make(map[change.ExportID]watermark.Record, len(wt.latest))
	for k, v := range wt.latest {
		out[k] = v
	}
	return out
}

// firstSeen returns when the watcher first saw e in state s.
func (wt *watcher) firstSeen(e change.ExportID, s watermark.State) (time.Time, bool) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	t, ok := wt.seen[stateKey{e, s}]
	return t, ok
}

// until waits until cond holds for the latest records, and returns when it was first seen to
// hold. check is called on every update (e.g. to notice that cdc died).
func (wt *watcher) until(ctx context.Context, what string, cond func(map[change.ExportID]watermark.Record) bool, check func() error) (time.Time, error) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		wt.mu.Lock()
		ok := cond(wt.latest)
		err := wt.err
		ch := wt.changed
		wt.mu.Unlock()
		if ok {
			return time.Now(), nil
		}
		for e, r := range wt.snapshot() {
			if r.State == watermark.StateFailed {
				return time.Time{}, fmt.Errorf("wait for %s: export %s failed: %s", what, e, r.Error)
			}
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("wait for %s: read watermarks: %w", what, err)
		}
		if check != nil {
			if err := check(); err != nil {
				return time.Time{}, fmt.Errorf("wait for %s: %w", what, err)
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for %s: %w; latest watermarks: %s", what, ctx.Err(), describeRecords(wt.snapshot()))
		case <-ch:
		case <-tick.C:
		}
	}
}

// allHydrated holds when every export is hydrated with a watermark of at least lsn.
func allHydrated(lsn change.LSN, exports ...change.ExportID) func(map[change.ExportID]watermark.Record) bool {
	return func(m map[change.ExportID]watermark.Record) bool {
		for _, e := range exports {
			r, ok := m[e]
			if !ok || r.State != watermark.StateHydrated || r.Watermark == nil || *r.Watermark < lsn {
				return false
			}
		}
		return true
	}
}

func describeRecords(m map[change.ExportID]watermark.Record) string {
	if len(m) == 0 {
		return "none"
	}
	s := ""
	for e, r := range m {
		w := "null"
		if r.Watermark != nil {
			w = r.Watermark.String()
		}
		s += fmt.Sprintf("%s=%s@%s ", e, r.State, w)
		if r.Error != "" {
			s += "(" + r.Error + ") "
		}
	}
	return s
}
