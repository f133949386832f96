package replication

import "testing"

func TestPublicationNamesOption(t *testing.T) {
	tests := []struct {
		name, pub, want string
	}{
		{"lower case", "tidemark", `'"tidemark"'`},
		{"mixed case keeps its case", "People_Pub", `'"People_Pub"'`},
		{"quote and apostrophe", `a"b'c`, `'"a""b''c"'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PublicationNamesOption(tt.pub); got != tt.want {
				t.Errorf("PublicationNamesOption(%q) = %s, want %s", tt.pub, got, tt.want)
			}
		})
	}
}
