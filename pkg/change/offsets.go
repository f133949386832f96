package change

// Offsets maps topic -> partition -> next offset: the last offset Kafka acknowledged + 1 (or,
// before anything was produced, the end offset the sink found when it made sure of the topic).
type Offsets map[string]map[int32]int64

// Clone returns a deep copy.
func (o Offsets) Clone() Offsets {
	c := make(Offsets, len(o))
	for topic, parts := range o {
		cp := make(map[int32]int64, len(parts))
		for p, off := range parts {
			cp[p] = off
		}
		c[topic] = cp
	}
	return c
}
