package avro

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tidemark/cdc/pkg/format/connectjson"
)

// TestFastPathsAgree checks the fast paths of timestamps against the general parsers they
// stand in for, on random renderings as PostgreSQL writes them.
func TestFastPathsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		ts := fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d", 1+rng.IntN(9999), 1+rng.IntN(12), 1+rng.IntN(28),
			rng.IntN(24), rng.IntN(60), rng.IntN(60))
		if f := rng.IntN(7); f > 0 {
			if frac := strings.TrimRight(fmt.Sprintf("%06d", rng.IntN(1_000_000))[:f], "0"); frac != "" {
				ts += "." + frac
			}
		}
		fast, ok := fastTimestamp([]byte(ts))
		slow, err := connectjson.TimestampMicros([]byte(ts), false)
		if !ok || err != nil || fast != slow {
			t.Fatalf("%s: fast %d (%v), slow %d (%v)", ts, fast, ok, slow, err)
		}
		tz := ts + "+00"
		got, ok := fastZoned([]byte(tz), nil)
		want, err := connectjson.AppendZonedTimestamp(nil, []byte(tz))
		if !ok || err != nil || string(got) != string(want) {
			t.Fatalf("%s: fast %s (%v), slow %s (%v)", tz, got, ok, want, err)
		}
	}
	for _, s := range []string{"infinity", "0044-03-15 12:00:00 BC", "12345-01-01 00:00:00", "2024-01-31 12:34:56+05:30", "2024-01-31T12:34:56", "2024-01-31 12:34:56.50"} {
		if _, ok := fastTimestamp([]byte(s)); ok && !strings.HasSuffix(s, "0") {
			t.Errorf("fastTimestamp took %q", s)
		}
		if _, ok := fastZoned([]byte(s+"+00"), nil); ok {
			t.Errorf("fastZoned took %q", s)
		}
	}
}

// TestFastDecimalAgrees checks the decimal fast path against the general one.
func TestFastDecimalAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var c converter
	for range 20000 {
		scale := rng.IntN(8)
		text := fmt.Sprint(rng.Int64N(1_000_000_000_000) - 500_000_000_000)
		if f := rng.IntN(scale + 2); f > 0 {
			text += "." + fmt.Sprintf("%0*d", f, rng.IntN(1_000_000_000))[:f]
		}
		fast, fastErr := c.appendDecimal(nil, 38, int32(scale), []byte(text))
		neg, intPart, frac, err := connectjson.ParseNumeric([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		digits := append(append([]byte{}, intPart...), frac...)
		for i := len(frac); i < scale; i++ {
			digits = append(digits, '0')
		}
		if len(frac) > scale {
			if fastErr == nil && strings.Trim(string(frac[scale:]), "0") != "" {
				t.Fatalf("%s at scale %d: no error for digits beyond the scale", text, scale)
			}
			continue
		}
		slow, _ := appendUnscaled(nil, neg, digits)
		if fastErr != nil || string(fast) != string(slow) {
			t.Fatalf("%s at scale %d: fast % x (%v), slow % x", text, scale, fast, fastErr, slow)
		}
	}
}
