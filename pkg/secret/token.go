package secret

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
)

// Token is a bearer token (CDC_HTTP_TOKEN) that can be checked but never shown: it keeps only
// the token's SHA-256 digest, so no log line, error or configuration dump can print it. The zero
// Token is unset and matches nothing.
type Token struct {
	digest [sha256.Size]byte
	set    bool
}

// NewToken returns the Token of s; an empty s gives the unset Token.
func NewToken(s string) Token {
	if s == "" {
		return Token{}
	}
	return Token{digest: sha256.Sum256([]byte(s)), set: true}
}

// IsSet reports whether a token is configured.
func (t Token) IsSet() bool { return t.set }

// Matches reports whether presented is the token, in time that does not depend on where the two
// differ or on their lengths (both are hashed first).
func (t Token) Matches(presented string) bool {
	if !t.set {
		return false
	}
	d := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1
}

// String says only whether the token is set.
func (t Token) String() string {
	if t.set {
		return Mask
	}
	return "(unset)"
}

// LogValue logs the token as String does.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }
