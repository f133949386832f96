// Package burst logs a per-table notice line by line while such notices are few, and as one
// summary line per interval while many come at once: a start of 10,000 tables logs a few
// lines a second of each kind ("export hydrated: 412 more tables, first ...; 6,200 so far"),
// not 10,000 lines of each. The lines it summarises are still logged one by one at debug
// level.
package burst

import (
	"log/slog"
	"sync"
	"time"
)

// Defaults of New: notices logged one by one per interval, and the interval.
const (
	DefaultBurst    = 5
	DefaultInterval = 2 * time.Second
	// firstNames is how many names a summary line lists.
	firstNames = 3
)

// Logger is safe for concurrent use.
type Logger struct {
	log      *slog.Logger
	msg      string // the notice, as logged one by one
	summary  string // the summary line's message
	burst    int
	interval time.Duration

	mu      sync.Mutex
	inRound int      // notices since the round began
	held    int      // notices of the round not logged at info level
	first   []string // names of the first held notices
	total   int64    // notices since New
	timer   *time.Timer
}

// New returns a Logger of msg (logged as is, one by one) whose summary lines say summary.
func New(log *slog.Logger, msg, summary string) *Logger {
	return &Logger{log: log, msg: msg, summary: summary, burst: DefaultBurst, interval: DefaultInterval}
}

// WithLimits sets how many notices an interval logs one by one before it summarises the rest
// (tests).
func (l *Logger) WithLimits(burst int, interval time.Duration) *Logger {
	l.burst, l.interval = burst, interval
	return l
}

// Note logs msg with attrs at info level, or, beyond the round's burst, at debug level and in
// the round's summary, which names name among its first.
func (l *Logger) Note(name string, attrs ...any) { l.NoteTo(l.log, name, attrs...) }

// NoteTo is Note with the one-by-one line logged to log (which may carry attributes of its
// own); the summary goes to the Logger's.
func (l *Logger) NoteTo(log *slog.Logger, name string, attrs ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	l.inRound++
	if l.timer == nil {
		// The round ends one interval after its first notice.
		l.timer = time.AfterFunc(l.interval, l.endRound)
	}
	if l.inRound <= l.burst {
		log.Info(l.msg, attrs...)
		return
	}
	log.Debug(l.msg, attrs...)
	l.held++
	if len(l.first) < firstNames {
		l.first = append(l.first, name)
	}
}

// Flush logs the summary of the notices held so far, if any, and begins a new round.
func (l *Logger) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.flushLocked()
}

func (l *Logger) endRound() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *Logger) flushLocked() {
	if l.held > 0 {
		l.log.Info(l.summary, "tables", l.held, "first", l.first, "logged_one_by_one", l.inRound-l.held,
			"interval", l.interval, "so_far", l.total)
	}
	l.inRound, l.held, l.first, l.timer = 0, 0, nil, nil
}
