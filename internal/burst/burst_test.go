package burst

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the timer's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

// TestBurstSummarises: a few notices are logged one by one; 1,000 at once are the burst's
// lines and one summary with the count, the first names and the total, at info level; every
// notice is still at debug level.
func TestBurstSummarises(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	l := New(log, "export hydrated", "exports hydrated").WithLimits(3, time.Hour)
	for i := range 2 {
		l.Note(fmt.Sprintf("t%d", i), "export", fmt.Sprintf("t%d", i))
	}
	l.Flush()
	if got := buf.lines(); len(got) != 2 || !strings.Contains(got[0], "export=t0") || !strings.Contains(got[1], "export=t1") {
		t.Fatalf("2 notices logged as %q, want them one by one", got)
	}
	for i := range 1000 {
		l.Note(fmt.Sprintf("u%03d", i), "export", fmt.Sprintf("u%03d", i))
	}
	l.Flush()
	got := buf.lines()[2:]
	if len(got) != 4 {
		t.Fatalf("1,000 notices logged as %d lines, want 3 one by one and a summary:\n%s", len(got), strings.Join(got, "\n"))
	}
	sum := got[3]
	for _, want := range []string{`msg="exports hydrated"`, "tables=997", "first=", "u003", "u004", "u005", "logged_one_by_one=3", "so_far=1002"} {
		if !strings.Contains(sum, want) {
			t.Fatalf("summary %q lacks %q", sum, want)
		}
	}
	if strings.Contains(sum, "u006") {
		t.Fatalf("summary %q names more than the first three", sum)
	}
}

// TestBurstRoundEndsByItself: the summary of a burst is logged once the interval has passed,
// without another notice or a Flush; the next round logs one by one again.
func TestBurstRoundEndsByItself(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := New(log, "chunked copy started", "chunked copies started").WithLimits(1, 50*time.Millisecond)
	for i := range 10 {
		l.Note(fmt.Sprint(i), "export", fmt.Sprint(i))
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(strings.Join(buf.lines(), "\n"), "chunked copies started") {
		if time.Now().After(deadline) {
			t.Fatalf("no summary 5s after the burst:\n%s", strings.Join(buf.lines(), "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	debug := 0
	for _, line := range buf.lines() {
		if strings.Contains(line, "level=DEBUG") && strings.Contains(line, `msg="chunked copy started"`) {
			debug++
		}
	}
	if debug != 9 {
		t.Fatalf("%d notices at debug level, want the 9 summarised", debug)
	}
	n := len(buf.lines())
	l.Note("next", "export", "next")
	if got := buf.lines(); len(got) != n+1 || !strings.Contains(got[n], "level=INFO") || !strings.Contains(got[n], "export=next") {
		t.Fatalf("a notice after the round logged as %q, want one info line", got[n:])
	}
	l.Flush()
}
