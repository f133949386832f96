package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark/cdc/internal/httpapi"
	"github.com/tidemark/cdc/pkg/conffile"
	"github.com/tidemark/cdc/pkg/secret"
)

// minTokenLen is the shortest CDC_HTTP_TOKEN accepted: 16 random characters are beyond guessing
// over HTTP, and a shorter one is most likely a placeholder.
const minTokenLen = 16

// maxTokenFileBytes bounds what is read of CDC_HTTP_TOKEN_FILE.
const maxTokenFileBytes = 4 << 10

// httpConfig checks CDC_HTTP_TOKEN, CDC_HTTP_TOKEN_FILE, CDC_HTTP_PPROF and
// CDC_HTTP_IDLE_TIMEOUT.
func (c *checker) httpConfig(e Env) httpapi.Config {
	h := httpapi.Config{IdleTimeout: c.durationBetween("CDC_HTTP_IDLE_TIMEOUT", e.HTTPIdleTimeout, time.Second, time.Hour)}
	token, name := e.HTTPToken, "CDC_HTTP_TOKEN"
	switch {
	case e.HTTPToken != "" && e.HTTPTokenFile != "":
		c.add("CDC_HTTP_TOKEN_FILE", "", "and CDC_HTTP_TOKEN are both set: set one of them")
		token = ""
	case e.HTTPTokenFile != "":
		name = "CDC_HTTP_TOKEN_FILE"
		t, err := readTokenFile(e.HTTPTokenFile)
		if err != nil {
			c.add(name, e.HTTPTokenFile, "%v", err)
		}
		token = t
	}
	if token != "" {
		if msg := tokenProblem(token); msg != "" {
			// The value is never shown: it is the secret, however malformed.
			c.add(name, "", "%s", msg)
		} else {
			h.Token = secret.NewToken(token)
		}
	}
	switch strings.ToLower(e.HTTPPprof) {
	case "true", "1", "yes":
		h.Pprof = true
		if e.HTTPToken == "" && e.HTTPTokenFile == "" {
			c.add("CDC_HTTP_PPROF", e.HTTPPprof, "needs CDC_HTTP_TOKEN or CDC_HTTP_TOKEN_FILE: pprof is served only behind the admin token")
		}
		if e.HTTPAddr == "" && e.MetricsAddr == "" {
			c.add("CDC_HTTP_PPROF", e.HTTPPprof, "needs CDC_HTTP_ADDR: pprof is served on the HTTP endpoints")
		}
	case "false", "0", "no":
	default:
		c.add("CDC_HTTP_PPROF", e.HTTPPprof, "want true or false")
	}
	return h
}

// tokenProblem says what is wrong with a token, or "" if nothing is. The message never quotes it.
func tokenProblem(t string) string {
	if len(t) < minTokenLen {
		return fmt.Sprintf("the token has %d characters, want at least %d (e.g. the output of `openssl rand -hex 32`)", len(t), minTokenLen)
	}
	for _, r := range t {
		if r <= ' ' || r > '~' {
			return "the token holds a space, a control character or a non-ASCII character; want printable ASCII (e.g. the output of `openssl rand -hex 32`)"
		}
	}
	return ""
}

// readTokenFile reads a token file through conffile, without blocking on a FIFO or a device: it
// must be a regular file of at most maxTokenFileBytes. Surrounding white space (a final newline)
// is dropped.
func readTokenFile(path string) (string, error) {
	b, err := conffile.Read(path, maxTokenFileBytes)
	if fe, ok := errors.AsType[*conffile.Error](err); ok {
		return "", errors.New(fe.Msg) // the caller names the variable; the path is not repeated
	}
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", errors.New("is empty")
	}
	return t, nil
}
