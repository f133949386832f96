// Package secret keeps PostgreSQL passwords out of error text and logs.
//
// Input: a connection string exactly as the user typed it — a URL of any scheme (postgres://,
// postgresql://, or a mistaken mysql://), with or without user info, percent-encoded or not,
// well formed or not, or a libpq key=value DSN with quoted and escaped values — and text or
// errors that may quote it, or parts of it (pgx's ParseConfigError, a dial error naming a host
// that a mistyped URL turned into a password fragment).
//
// Output: Redact masks every password field of the connection string itself; Scrub and
// ScrubError mask, in any other text, every password the connection string holds (as typed and as
// decoded) and every password field of a connection string quoted inside it. ScrubError keeps the
// error chain, so errors.Is and errors.As still classify the error.
//
// Guarantee: where the string is ambiguous (an unencoded '@' or '/' in a URL's password, a '&'
// in a query password, a space in an unquoted key=value password, which libpq would reject),
// redaction masks more than the password, never less: an unquoted key=value password runs over
// white space up to the next libpq key=, and a parser's quoted word of it ("missing = after
// "def"") is masked at any length. Masking is by the
// fixed text "xxxxx", so the output says nothing about the password's length.
//
// Token holds a bearer token (the HTTP admin token) as its SHA-256 digest only: it can be checked,
// in constant time, but never printed.
package secret
