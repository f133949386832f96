package consumer

import (
	"math/rand/v2"
	"testing"
)

// TestReaderRandomInputs runs FuzzReader's checks over random inputs in every test run, not
// only when fuzzing.
func TestReaderRandomInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 1))
	n := 3000
	if testing.Short() {
		n = 500
	}
	for range n {
		in := make([]byte, rng.IntN(3000))
		for i := range in {
			in[i] = byte(rng.IntN(256))
		}
		fuzzReader(t, in)
	}
}
