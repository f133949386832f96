package replication

import (
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

func TestSwitchPoint(t *testing.T) {
	for _, tc := range []struct {
		name, history string
		want          change.LSN
		err           bool
	}{
		{name: "one promotion", history: "1\t0/3054A38\tno recovery target specified\n", want: 0x3054A38},
		{name: "two promotions", history: "1\t0/3000000\tno recovery target specified\n\n2\t0/5000108\tno recovery target specified\n", want: 0x5000108},
		{name: "comments", history: "# comment\n1\t1/20\tbefore 2026-12-05\n", want: 1<<32 | 0x20},
		{name: "empty", history: "", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := switchPoint(tc.history)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("switchPoint = %s, %v; want %s (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}
