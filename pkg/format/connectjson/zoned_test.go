package connectjson

import "testing"

func TestAppendZonedTimestampText(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"AD", "2024-01-31T12:34:56.5Z", "2024-01-31T12:34:56.5Z"},
		{"44 BC", "-0043-03-15T12:00:00Z", "0044-03-15T12:00:00Z BC"},
		{"1 BC", "0000-12-31T23:59:59.999999Z", "0001-12-31T23:59:59.999999Z BC"},
		{"4713 BC", "-4712-01-01T00:00:00Z", "4713-01-01T00:00:00Z BC"},
		{"year 1", "0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"},
		{"infinity", "infinity", "infinity"},
		{"-infinity", "-infinity", "-infinity"},
		{"five digits", "-10000-01-01T00:00:00Z", "10001-01-01T00:00:00Z BC"},
		{"not a date", "-12", "-12"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := string(AppendZonedTimestampText([]byte("x"), []byte(c.in))); got != "x"+c.want {
				t.Errorf("AppendZonedTimestampText(%q) = %q, want %q", c.in, got[1:], c.want)
			}
		})
	}
}
