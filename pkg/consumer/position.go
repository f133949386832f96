package consumer

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/tidemark/cdc/pkg/change"
)

// Position is where a cut ends: its LSN, the offsets below which it was read, and the copy
// attempt of each joined table. It is what Config.Resume takes.
type Position struct {
	// LSN is the cut's LSN: changes with a lower commit LSN were delivered.
	LSN change.LSN `json:"lsn"`
	// Offsets are, per data topic and partition, the next offset to read: every record below
	// it was delivered or dropped; records at or above it with a commit LSN >= LSN were not.
	Offsets map[string]map[int32]int64 `json:"offsets"`
	// Joined are the joined tables and their copy attempts.
	Joined map[change.ExportID]int `json:"joined"`
	// Held are the tables that were joined and are being copied again, with the attempt the
	// cuts wait for.
	Held map[change.ExportID]int `json:"held,omitempty"`
}

// positionVersion is written with a marshalled Position.
const positionVersion = 1

// MarshalJSON renders the position with a format version, for storing.
func (p Position) MarshalJSON() ([]byte, error) {
	type plain Position
	return json.Marshal(struct {
		Version int `json:"version"`
		plain
	}{positionVersion, plain(p)})
}

// UnmarshalJSON parses what MarshalJSON wrote.
func (p *Position) UnmarshalJSON(b []byte) error {
	type plain Position
	var v struct {
		Version int `json:"version"`
		plain
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("decode position: %w", err)
	}
	if v.Version != positionVersion {
		return fmt.Errorf("decode position: version %d, want %d", v.Version, positionVersion)
	}
	*p = Position(v.plain)
	return nil
}

// ParsePosition parses a stored position (MarshalJSON's output).
func ParsePosition(b []byte) (Position, error) {
	var p Position
	err := json.Unmarshal(b, &p)
	return p, err
}

// Clone returns a deep copy.
func (p Position) Clone() Position {
	c := Position{LSN: p.LSN, Offsets: make(map[string]map[int32]int64, len(p.Offsets)), Joined: maps.Clone(p.Joined), Held: maps.Clone(p.Held)}
	for t, parts := range p.Offsets {
		c.Offsets[t] = maps.Clone(parts)
	}
	if c.Joined == nil {
		c.Joined = map[change.ExportID]int{}
	}
	return c
}
