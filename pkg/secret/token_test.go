package secret

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestToken(t *testing.T) {
	const value = "s3cret-token-0123456789"
	tok := NewToken(value)
	tests := []struct {
		name      string
		tok       Token
		presented string
		want      bool
	}{
		{"same", tok, value, true},
		{"other", tok, "s3cret-token-0123456788", false},
		{"prefix", tok, value[:10], false},
		{"longer", tok, value + "x", false},
		{"empty", tok, "", false},
		{"unset matches nothing", Token{}, "", false},
		{"unset from empty", NewToken(""), "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tok.Matches(tc.presented); got != tc.want {
				t.Errorf("Matches(%q) = %v, want %v", tc.presented, got, tc.want)
			}
		})
	}
	if !tok.IsSet() || NewToken("").IsSet() {
		t.Errorf("IsSet: %v for a token, %v for none", tok.IsSet(), NewToken("").IsSet())
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "token", tok, "struct", struct{ T Token }{tok})
	shown := logged.String() + fmt.Sprintf("%v %+v %#v %s", tok, tok, tok, tok)
	if strings.Contains(shown, value) || strings.Contains(shown, value[:8]) {
		t.Errorf("the token shows: %s", shown)
	}
}
