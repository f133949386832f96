package watermark

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// Version is the version of the record format that Encode writes and Decode accepts.
const Version = 1

// ErrUnsupportedVersion is returned by Decode for a record written by a newer format version.
var ErrUnsupportedVersion = errors.New("unsupported watermark record version")

// Record is one watermark record: the value of the watermark topic, keyed by export. See the
// package documentation for the meaning of each field and an example.
type Record struct {
	Version int             `json:"version"`
	Export  change.ExportID `json:"export"`
	Topic   string          `json:"topic"`
	State   State           `json:"state"`
	Mode    Mode            `json:"mode"`
	// Watermark is W(e) as "X/Y", or null while the export has none.
	Watermark *change.LSN `json:"watermark"`
	// WatermarkLSN is Watermark as a number, to compare with a change's source.lsn.
	WatermarkLSN *uint64 `json:"watermark_lsn"`
	// Position is the export's own position P(e); 0/0 while it has none (hydrating).
	Position change.LSN `json:"position"`
	// Offsets are the end offsets, per partition of Topic, that the watermark covers.
	Offsets  map[int32]int64 `json:"offsets"`
	Snapshot *SnapshotInfo   `json:"snapshot,omitempty"`
	Error    string          `json:"error,omitempty"`
	Time     time.Time       `json:"ts"`
}

// SnapshotInfo describes the export's current (or, once hydrated, last) snapshot attempt.
type SnapshotInfo struct {
	Attempt int `json:"attempt"`
	// Strategy is StrategyCopy or StrategyChunked (absent in records of earlier versions: copy).
	Strategy string `json:"strategy,omitempty"`
	// ConsistentPoint is C of a copy (0/0 for a chunked copy, whose chunks each read the table
	// at their own position).
	ConsistentPoint change.LSN `json:"consistent_point"`
	RowsCopied      int64      `json:"rows_copied"`
	RowsEstimated   int64      `json:"rows_estimated"`
	// ChunksDone and ResumeAfter: a chunked copy's durable chunks and the key after which it
	// goes on (the text of each key column; null before the first chunk).
	ChunksDone  int      `json:"chunks_done,omitempty"`
	ResumeAfter []string `json:"resume_after,omitempty"`
	// RowsPerSecond and ETASeconds: the copy's rate in the running process and the time it
	// expects to need for the rest (from RowsEstimated), while copying.
	RowsPerSecond float64   `json:"rows_per_second,omitempty"`
	ETASeconds    *float64  `json:"eta_seconds,omitempty"`
	StartedAt     time.Time `json:"started_at"`
	// FinishedAt is when the whole copy was durable; absent while copying.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// StartOffsets are the end offsets of Topic, per partition, when this attempt began.
	StartOffsets map[int32]int64 `json:"start_offsets"`
	// ReconcileFrom are the offsets, per partition of Topic, from which the rows of earlier
	// attempts must be reconciled before the export may be hydrated: the start offsets of the
	// earliest attempt not followed by a hydrated state. A partition not listed is read from its
	// earliest offset (an export removed and added again is reconciled from the beginning).
	ReconcileFrom map[int32]int64 `json:"reconcile_from,omitempty"`
	// Publication is the publication's column list and row filter this attempt copied
	// (PostgreSQL 15); absent when it publishes every column and row.
	Publication *PublishedInfo `json:"publication,omitempty"`
}

// PublishedInfo describes a publication's column list and row filter for one table.
type PublishedInfo struct {
	// Columns are the column list's names when the copy began; absent for every column.
	Columns []string `json:"columns,omitempty"`
	// RowFilter is the row filter as PostgreSQL renders it; absent for every row.
	RowFilter string `json:"row_filter,omitempty"`
	// Digest identifies the definition (change.PublishedAs.Digest): it stays the same when a
	// column is renamed and changes with anything the publication publishes.
	Digest string `json:"digest"`
}

// Snapshot strategies.
const (
	StrategyCopy    = "copy"
	StrategyChunked = "chunked"
)

// clone returns a deep copy (nil for nil).
func (s *SnapshotInfo) clone() *SnapshotInfo {
	if s == nil {
		return nil
	}
	c := *s
	if s.FinishedAt != nil {
		f := *s.FinishedAt
		c.FinishedAt = &f
	}
	c.StartOffsets = maps.Clone(s.StartOffsets)
	c.ResumeAfter = slices.Clone(s.ResumeAfter)
	if s.ETASeconds != nil {
		v := *s.ETASeconds
		c.ETASeconds = &v
	}
	c.ReconcileFrom = maps.Clone(s.ReconcileFrom)
	if s.Publication != nil {
		p := *s.Publication
		p.Columns = slices.Clone(p.Columns)
		c.Publication = &p
	}
	return &c
}

// Key is the record's key in the compacted watermark topic: the export's name.
func (r Record) Key() []byte { return []byte(r.Export.String()) }

// Encode renders r as JSON. A zero Version is written as the current Version, and
// WatermarkLSN is always derived from Watermark so the two cannot disagree.
func Encode(r Record) ([]byte, error) {
	if r.Version == 0 {
		r.Version = Version
	}
	if r.Version != Version {
		return nil, fmt.Errorf("encode watermark record of %s: version %d: %w", r.Export, r.Version, ErrUnsupportedVersion)
	}
	if !r.State.valid() {
		return nil, fmt.Errorf("encode watermark record of %s: invalid state %q", r.Export, r.State)
	}
	r.WatermarkLSN = lsnNumber(r.Watermark)
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode watermark record of %s: %w", r.Export, err)
	}
	return b, nil
}

// Decode parses a record written by Encode. It rejects records of a newer version (wrapping
// ErrUnsupportedVersion), records without a version, an export or a known state, and
// records whose watermark and watermark_lsn disagree. A record carrying only watermark_lsn
// gets Watermark filled in.
func Decode(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("decode watermark record: %w", err)
	}
	what := "watermark record"
	if r.Export.Table != "" {
		what += " of " + r.Export.String()
	}
	if err := checkVersion(what, r.Version, Version); err != nil {
		return Record{}, err
	}
	switch {
	case r.Export.Table == "":
		return Record{}, errors.New("decode watermark record: missing export")
	case !r.State.valid():
		return Record{}, fmt.Errorf("decode watermark record of %s: unknown state %q", r.Export, r.State)
	}
	switch {
	case r.Watermark == nil && r.WatermarkLSN != nil:
		w := change.LSN(*r.WatermarkLSN)
		r.Watermark = &w
	case r.Watermark != nil && r.WatermarkLSN == nil:
		r.WatermarkLSN = lsnNumber(r.Watermark)
	case r.Watermark != nil && uint64(*r.Watermark) != *r.WatermarkLSN:
		return Record{}, fmt.Errorf("decode watermark record of %s: watermark %s and watermark_lsn %d disagree",
			r.Export, r.Watermark, *r.WatermarkLSN)
	}
	return r, nil
}

// checkVersion refuses a value of version v when this build reads at most newest (a newer cdc
// wrote it: ErrUnsupportedVersion), or when v is missing.
func checkVersion(what string, v, newest int) error {
	switch {
	case v > newest:
		return fmt.Errorf("decode %s: version %d is newer than %d, the newest this build reads (upgrade cdc): %w", what, v, newest, ErrUnsupportedVersion)
	case v < 1:
		return fmt.Errorf("decode %s: missing or invalid version %d", what, v)
	}
	return nil
}

// lsnNumber returns w as a *uint64 (nil for nil).
func lsnNumber(w *change.LSN) *uint64 {
	if w == nil {
		return nil
	}
	n := uint64(*w)
	return &n
}
