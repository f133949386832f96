package snapshot

// Strategy is how a table's rows are copied (CDC_SNAPSHOT_STRATEGY). The zero value is
// DefaultStrategy. Tables without a key, and tables whose topic needs reconciling (added
// again, or whose earlier copy never finished), are copied with StrategyCopy either way.
type Strategy string

// Snapshot strategies.
const (
	// StrategyChunked copies a table in key-range chunks, each read in a short transaction of
	// its own and merged with the stream (Chunker): resumable, and no long transaction.
	StrategyChunked Strategy = "chunked"
	// StrategyCopy copies the tables added together under one exported snapshot (Stage).
	StrategyCopy Strategy = "copy"
	// DefaultStrategy is the strategy of the zero value.
	DefaultStrategy = StrategyChunked
)

// OrDefault returns s, or DefaultStrategy when s is empty.
func (s Strategy) OrDefault() Strategy {
	if s == "" {
		return DefaultStrategy
	}
	return s
}
