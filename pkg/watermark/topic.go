package watermark

// DecodeTopic decodes the values of the watermark topic in offset order: the watermark records
// and the last checkpoint (nil if there is none). Tombstones (nil values) are skipped.
func DecodeTopic(values [][]byte) ([]Record, *Checkpoint, error) {
	recs := make([]Record, 0, len(values))
	var last *Checkpoint
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
		r, err := Decode(v)
		if err != nil {
			return nil, nil, err
		}
		recs = append(recs, r)
	}
	return recs, last, nil
}
