package httpapi

import (
	"context"
	"log/slog"
	"mime"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/cdc/pkg/secret"
)

// enableAdmin is how to turn the admin endpoints on, for the answers that refuse them.
const enableAdmin = "set CDC_HTTP_TOKEN (or CDC_HTTP_TOKEN_FILE) on the service, and send it as Authorization: Bearer <token>"

// bearer returns the token of an Authorization header, and whether the header is there at all.
func bearer(r *http.Request) (token string, present bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(token), true
}

// requireAdmin answers 403 when no token is configured (the admin endpoints are off), 401 when
// the request carries no token or a wrong one; it reports whether the request may go on.
func requireAdmin(w http.ResponseWriter, r *http.Request, token secret.Token, what string, log *slog.Logger) bool {
	if !token.IsSet() {
		http.Error(w, what+" is off: "+enableAdmin, http.StatusForbidden)
		return false
	}
	got, present := bearer(r)
	switch {
	case !present:
		w.Header().Set("WWW-Authenticate", `Bearer realm="tidemark"`)
		http.Error(w, what+" needs the admin token: send Authorization: Bearer <CDC_HTTP_TOKEN>", http.StatusUnauthorized)
		return false
	case !token.Matches(got):
		log.Warn("http request with a wrong token refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="tidemark", error="invalid_token"`)
		http.Error(w, "wrong token: send Authorization: Bearer <CDC_HTTP_TOKEN>", http.StatusUnauthorized)
		return false
	}
	return true
}

// readAccess decides how much a read-only endpoint shows: full (error texts included) with the
// admin token, redacted without any Authorization header. A header with a wrong token, or one
// sent while no token is configured, is refused rather than quietly given less.
func readAccess(w http.ResponseWriter, r *http.Request, token secret.Token, log *slog.Logger) (full, ok bool) {
	if _, present := bearer(r); !present {
		return false, true
	}
	if !requireAdmin(w, r, token, "showing full error texts", log) {
		return false, false
	}
	return true, true
}

// guardStateChange lets a state-changing request through only when a browser could not have
// sent it on behalf of another site, and it carries the admin token:
//
//   - not cross-origin by the browser's own account (Sec-Fetch-Site, else Origin against Host;
//     http.CrossOriginProtection): 403;
//   - the admin token (requireAdmin): 401 or 403;
//   - Content-Type application/json: no HTML form can send it, and together with the
//     Authorization header it makes the request one that a browser preflights: 415;
//   - a body of at most httpMaxBodyBytes (it is not used): 413.
//
// The route itself admits only POST (405 for other methods).
func guardStateChange(token secret.Token, what string, log *slog.Logger, h http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := cop.Check(r); err != nil {
			log.Warn("cross-origin http request refused", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
			http.Error(w, what+" refused: a cross-origin request (Origin or Sec-Fetch-Site names another site)", http.StatusForbidden)
			return
		}
		if !requireAdmin(w, r, token, what, log) {
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			http.Error(w, what+" needs Content-Type: application/json", http.StatusUnsupportedMediaType)
			return
		}
		if !drainBody(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// pprofMaxSeconds bounds a CPU profile's or trace's ?seconds=.
const pprofMaxSeconds = 120

// addPprofRoutes serves Go's profiles behind the admin token with CDC_HTTP_PPROF=true, and a 404
// saying how to turn them on otherwise.
func addPprofRoutes(mux *http.ServeMux, cfg Config, log *slog.Logger) {
	if !cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "pprof is off: set CDC_HTTP_PPROF=true and CDC_HTTP_TOKEN to serve it behind the token", http.StatusNotFound)
		})
		return
	}
	admin := func(h http.HandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if requireAdmin(w, r, cfg.Token, "pprof", log) {
				h(w, r)
			}
		})
	}
	mux.Handle("GET /debug/pprof/", admin(pprof.Index))
	mux.Handle("GET /debug/pprof/cmdline", admin(pprof.Cmdline))
	mux.Handle("GET /debug/pprof/symbol", admin(pprof.Symbol))
	mux.Handle("GET /debug/pprof/profile", admin(longRunning(pprof.Profile, 30)))
	mux.Handle("GET /debug/pprof/trace", admin(longRunning(pprof.Trace, 1)))
}

// longRunning lets a CPU profile or trace run for its ?seconds= (default def, at most
// pprofMaxSeconds) although the server's write timeout is shorter: it moves this connection's
// read and write deadlines to the profile's end plus httpWriteTimeout, and shows net/http/pprof
// (which refuses a duration past the server's WriteTimeout) a server with that timeout.
func longRunning(h http.HandlerFunc, def float64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sec := def
		if s := r.FormValue("seconds"); s != "" {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || v <= 0 || v > pprofMaxSeconds {
				http.Error(w, "seconds: want a number from 0 to "+strconv.Itoa(pprofMaxSeconds), http.StatusBadRequest)
				return
			}
			sec = v
		}
		limit := time.Duration(sec*float64(time.Second)) + httpWriteTimeout
		rc := http.NewResponseController(w)
		deadline := time.Now().Add(limit)
		if err := rc.SetWriteDeadline(deadline); err != nil {
			http.Error(w, "cannot extend the write deadline: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_ = rc.SetReadDeadline(deadline)
		ctx := context.WithValue(r.Context(), http.ServerContextKey, &http.Server{WriteTimeout: limit})
		h(w, r.WithContext(ctx))
	}
}
