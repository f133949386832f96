package preflight

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidemark/cdc/pkg/schemareg"
)

// registryFix is the advice when the schema registry does not answer.
const registryFix = "check CDC_SCHEMA_REGISTRY_URL (the base URL of the registry's Confluent-compatible API: " +
	"for Apicurio Registry http(s)://host:port/apis/ccompat/v7) and that the registry is running"

// registryTLSFix is the advice when the TLS handshake with the registry fails on the settings.
const registryTLSFix = "fix the CDC_SCHEMA_REGISTRY_TLS_* setting (or the URL) that the message names: " +
	"CDC_SCHEMA_REGISTRY_TLS_CA_FILE must hold the CA that signed the registry's certificate, " +
	"CDC_SCHEMA_REGISTRY_TLS_SERVER_NAME a name the certificate is valid for"

// schemaRegistry checks the schema registry of CDC_SCHEMA_REGISTRY_URL, when one is set: how the
// connection is protected, that the registry answers and accepts the credentials, and the
// compatibility level new subjects get. It reads only (GET /config).
func (p *checker) schemaRegistry(ctx context.Context) {
	cfg := p.registry
	if cfg.URL == "" {
		return
	}
	cfg.RequestTimeout = p.cfg.ConnectTimeout
	cl, err := schemareg.New(cfg)
	if err != nil {
		p.fail("check the CDC_SCHEMA_REGISTRY_TLS_* files", "schema registry: %v", err)
		return
	}
	level, err := cl.Compatibility(ctx, "")
	if !errors.Is(err, schemareg.ErrTLS) {
		// The connection's protection, once the handshake went through (a ✓ "certificate
		// verified" beside the ✗ of a certificate that did not verify would contradict it).
		p.registryPosture(cfg)
	}
	switch {
	case errors.Is(err, schemareg.ErrUnauthorized):
		p.fail("check CDC_SCHEMA_REGISTRY_USERNAME and CDC_SCHEMA_REGISTRY_PASSWORD, and the user's rights in the registry",
			"schema registry %s answers, but refused the credentials of user %q: %v", cfg.URL, cfg.Username, err)
	case errors.Is(err, schemareg.ErrTLS):
		// The registry answered the connection; the TLS settings are what to fix, as err says.
		p.fail(registryTLSFix, "schema registry %s: %v", cfg.URL, err)
	case err != nil:
		p.fail(registryFix, "schema registry %s: %v", cfg.URL, err)
	default:
		auth := "without authentication"
		if cfg.Username != "" {
			auth = fmt.Sprintf("as %s", cfg.Username)
		}
		p.pass("schema registry %s reachable %s; compatibility level of new subjects: %s", cfg.URL, auth, level)
	}
}

// registryPosture reports how the connection to the registry is protected.
func (p *checker) registryPosture(cfg schemareg.Config) {
	switch {
	case cfg.TLS():
		roots := "the system roots"
		if cfg.CAFile != "" {
			roots = "CDC_SCHEMA_REGISTRY_TLS_CA_FILE"
		}
		p.pass("schema registry: encrypted, certificate verified against %s", roots)
	case cfg.Warning() != "":
		p.warn("use the registry's https:// URL in CDC_SCHEMA_REGISTRY_URL (with CDC_SCHEMA_REGISTRY_TLS_CA_FILE for a private CA)",
			"schema registry: not encrypted (http://): %s", cfg.Warning())
	default:
		p.pass("schema registry: not encrypted (http://), on this host")
	}
}
