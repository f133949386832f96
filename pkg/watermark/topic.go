package watermark

import "github.com/tidemark/cdc/pkg/change"

// DecodeTopic decodes the values of the watermark topic in offset order: the watermark records
// and the last checkpoint (nil if there is none). Tombstones (nil values) are skipped. The last
// record of each export that a later quiet record speaks for carries the quiet record's
// watermark when that is higher (see View), so the records say what readers were told.
func DecodeTopic(values [][]byte) ([]Record, *Checkpoint, error) {
	recs := make([]Record, 0, len(values))
	var last *Checkpoint
	view := NewView()
	lastIdx := make(map[change.ExportID]int)
	for _, v := range values {
		if v == nil {
			continue
		}
		if cp, ok, err := DecodeCheckpoint(v); ok {
			if err != nil {
				return nil, nil, err
			}
			last = &cp
			continue
		}
		if _, err := view.Add(v); err != nil {
			return nil, nil, err
		}
		if _, ok, _ := DecodeQuiet(v); ok {
			continue
		}
		r, err := Decode(v)
		if err != nil {
			return nil, nil, err
		}
		lastIdx[r.Export] = len(recs)
		recs = append(recs, r)
	}
	for e, i := range lastIdx {
		recs[i], _ = view.Get(e)
	}
	return recs, last, nil
}
