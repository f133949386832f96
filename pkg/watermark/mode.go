package watermark

import (
	"fmt"
	"strings"
)

// Mode says how the watermarks of different exports relate (CDC_WATERMARK_MODE).
type Mode string

// Watermark modes.
const (
	// ModeIndependent gives every hydrated export its own watermark, its own position P(e).
	// Exports never wait for another export's snapshot. The default.
	ModeIndependent Mode = "independent"
	// ModeGlobal gives every live export the same watermark: the minimum over live exports,
	// which does not advance while any export is hydrating.
	ModeGlobal Mode = "global"
)

// ParseMode parses a CDC_WATERMARK_MODE value. The empty string is the default,
// ModeIndependent; anything else must be "independent" or "global" (case-insensitive).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", string(ModeIndependent):
		return ModeIndependent, nil
	case string(ModeGlobal):
		return ModeGlobal, nil
	default:
		return "", fmt.Errorf("parse watermark mode %q: want %q or %q", s, ModeIndependent, ModeGlobal)
	}
}

// State is an export's lifecycle state as the tracker and the watermark records see it.
type State string

// Export states.
const (
	// StateHydrating: the export's snapshot, or the changes held back during it, are not all
	// durable yet.
	StateHydrating State = "hydrating"
	// StateHydrated: the snapshot and every change up to the export's own position are durable;
	// its changes flow directly.
	StateHydrated State = "hydrated"
	// StateRemoved: the table left the publication; the record is the export's last.
	StateRemoved State = "removed"
	// StateFailed: the export stopped on a permanent error (Record.Error says why).
	StateFailed State = "failed"
)

// valid reports whether s is one of the four states.
func (s State) valid() bool {
	switch s {
	case StateHydrating, StateHydrated, StateRemoved, StateFailed:
		return true
	}
	return false
}

// live reports whether an export in state s is being exported (and gets heartbeats).
func (s State) live() bool { return s == StateHydrating || s == StateHydrated }
