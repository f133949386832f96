package watermark

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// CheckpointKey is the key of the checkpoint record in the watermark topic. Export keys always
// contain a dot ("schema.table"), so it cannot collide with one.
const CheckpointKey = "__checkpoint"

// checkpointKind tells a checkpoint value from a watermark record value.
const checkpointKind = "checkpoint"

// CheckpointVersion is the newest checkpoint format this build reads. A checkpoint that names
// a partly published transaction (Partial) is written as version 2, so that a build which would
// publish that transaction again from its start refuses it; every other checkpoint stays at
// version 1.
const CheckpointVersion = 2

// Checkpoint is the record that makes a restart resume past everything Kafka holds. The sink
// writes one into every Kafka transaction (exactly-once) or batch (at-least-once) that moved the
// durable stream position, in the watermark topic under CheckpointKey. Compaction keeps the
// latest.
//
// Position is the durable stream position S_d as of that transaction: every change with commit
// LSN below it of every export that was hydrated at the time is in Kafka. An export whose last
// watermark record says hydrated has stayed hydrated since that record (any state transition gets
// its record in the same transaction that moves on), so at restart its own position is the
// higher of its record's position and the checkpoint's.
type Checkpoint struct {
	Version  int        `json:"version"`
	Kind     string     `json:"kind"`
	Position change.LSN `json:"position"`
	// PositionLSN is Position as a number.
	PositionLSN uint64 `json:"position_lsn"`
	// Partial, when set, names a transaction published in several Kafka transactions whose
	// first Partial.Changes changes are durable, and its last piece not yet: a restart skips
	// those changes when the server sends the transaction again. Position is below that
	// transaction's commit.
	Partial *change.Partial `json:"partial,omitempty"`
	// Timeline and PromotedAt name the PostgreSQL timeline the positions were read on, and
	// where it branched off its parent (absent on timeline 1, and in checkpoints of builds
	// that did not record it: Timeline 0). After a failover they tell the promoted server's own
	// changes past the promotion from changes of the old primary's WAL past it (Origin).
	Timeline   int32       `json:"timeline,omitempty"`
	PromotedAt *change.LSN `json:"promoted_at,omitempty"`
	Time       time.Time   `json:"ts"`
}

// Origin is the PostgreSQL timeline that a life of the pipeline reads: its ID and the switch
// point where it branched off its parent (0/0 on timeline 1). The zero Origin is unknown.
type Origin struct {
	Timeline   int32
	PromotedAt change.LSN
}

// Origin returns the timeline cp's positions were read on (zero: not recorded).
func (cp Checkpoint) Origin() Origin {
	o := Origin{Timeline: cp.Timeline}
	if cp.PromotedAt != nil {
		o.PromotedAt = *cp.PromotedAt
	}
	return o
}

// String renders o as "timeline N (promoted at X/Y)", or "timeline 1".
func (o Origin) String() string {
	switch {
	case o.Timeline == 0:
		return "an unrecorded timeline"
	case o.PromotedAt == 0:
		return fmt.Sprintf("timeline %d", o.Timeline)
	}
	return fmt.Sprintf("timeline %d (promoted at %s)", o.Timeline, o.PromotedAt)
}

// EncodeCheckpoint renders the checkpoint value for position at now, with the partly
// published transaction partial (nil: none).
func EncodeCheckpoint(position change.LSN, partial *change.Partial, now time.Time) ([]byte, error) {
	return EncodeCheckpointOn(Origin{}, position, partial, now)
}

// EncodeCheckpointOn is EncodeCheckpoint for positions read on timeline origin (the zero
// Origin records none). The fields are additions a reader of version 1 ignores.
func EncodeCheckpointOn(origin Origin, position change.LSN, partial *change.Partial, now time.Time) ([]byte, error) {
	cp := Checkpoint{Version: Version, Kind: checkpointKind, Position: position, PositionLSN: uint64(position), Partial: partial, Time: now.UTC()}
	if origin.Timeline > 0 {
		cp.Timeline = origin.Timeline
		if origin.PromotedAt != 0 {
			at := origin.PromotedAt
			cp.PromotedAt = &at
		}
	}
	if partial != nil {
		cp.Version = CheckpointVersion
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return b, nil
}

// valueKind returns the "kind" of a value of the watermark topic: checkpointKind, quietKind, or
// "" for an export's own record and for anything that is not a JSON object.
func valueKind(b []byte) string {
	var probe struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(b, &probe) != nil {
		return ""
	}
	return probe.Kind
}

// DecodeCheckpoint parses b if it is a checkpoint value; ok is false for any other value (a
// watermark record), which Decode reads instead.
func DecodeCheckpoint(b []byte) (cp Checkpoint, ok bool, err error) {
	if valueKind(b) != checkpointKind {
		return Checkpoint{}, false, nil
	}
	cp, err = decodeCheckpoint(b)
	return cp, true, err
}

// decodeCheckpoint parses b, a value of kind checkpointKind.
func decodeCheckpoint(b []byte) (cp Checkpoint, err error) {
	if err := json.Unmarshal(b, &cp); err != nil {
		return Checkpoint{}, fmt.Errorf("decode checkpoint: %w", err)
	}
	if err := checkVersion("checkpoint", cp.Version, CheckpointVersion); err != nil {
		return Checkpoint{}, err
	}
	switch {
	case cp.PositionLSN != 0 && uint64(cp.Position) != cp.PositionLSN:
		return Checkpoint{}, fmt.Errorf("decode checkpoint: position %s and position_lsn %d disagree", cp.Position, cp.PositionLSN)
	case cp.Partial != nil && (cp.Partial.Changes <= 0 || cp.Partial.Commit < cp.Position):
		return Checkpoint{}, fmt.Errorf("decode checkpoint: partial transaction at %s with %d changes does not follow position %s",
			cp.Partial.Commit, cp.Partial.Changes, cp.Position)
	}
	return cp, nil
}

// RestoreCheckpoint applies the checkpoint read at start-up, after Restore: the durable stream
// position starts at cp, so every export restored hydrated resumes at or above it, and the
// exports keep pinning WAL at it until their next durable record.
func (t *Tracker) RestoreCheckpoint(position change.LSN) {
	t.Advance(position)
	t.cpDurable = max(t.cpDurable, position)
	t.cpReturned = max(t.cpReturned, position)
}

// CheckpointAt is Checkpoint for a transaction whose units end at end, called before they are
// flushed and before Advance (exactly-once: the transaction makes them durable together).
func (t *Tracker) CheckpointAt(end change.LSN) (change.LSN, bool) {
	if end <= t.cpReturned {
		return 0, false
	}
	t.cpReturned = end
	t.cpPending, t.hasCPPending = end, true
	return end, true
}

// CheckpointPosition is the position of the latest checkpoint returned (or restored): a
// checkpoint written only to record a partly published transaction carries it, so that it
// never lowers the position a restart resumes from.
func (t *Tracker) CheckpointPosition() change.LSN { return t.cpReturned }

// Checkpoint returns the durable stream position to write into the transaction being made
// durable, when it moved since the last one returned. Like Due's records, it is in flight until
// Published.
func (t *Tracker) Checkpoint() (change.LSN, bool) {
	if !t.hasSD {
		return 0, false
	}
	return t.CheckpointAt(t.sd)
}
