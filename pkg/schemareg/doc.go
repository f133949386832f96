// Package schemareg is Tidemark's client of a Confluent-compatible schema registry (Confluent
// Schema Registry, Apicurio Registry's /apis/ccompat/v7, Redpanda's, Karapace): the registry
// that the Avro format's records name by schema id. It is a leaf: it imports franz-go's pkg/sr
// and the standard library (and pkg/conffile for certificate files), never a format or a stage.
//
// Input: Config, read from the CDC_SCHEMA_REGISTRY_* variables by ReadEnv and checked by
// Env.Config with every problem listed: the registry's URL, HTTP basic auth, and TLS with the
// same rules as Kafka's (pkg/kafkaconn): https:// verifies the registry's certificate against
// CDC_SCHEMA_REGISTRY_TLS_CA_FILE or the system roots, for the URL's host or
// CDC_SCHEMA_REGISTRY_TLS_SERVER_NAME, with an optional client certificate; verification
// cannot be turned off. Plain http:// to another host than the loopback one is allowed, and
// Config.Warning says what it puts at risk, as the Kafka posture does for a plaintext listener.
//
// Output: a Client whose Register returns the id the registry gave a schema under a subject,
// and whose Schema returns the schema of an id. Both are cached for the life of the Client: by
// (subject, type, schema text) and by id. An id is only ever one the registry returned.
//
// Guarantees:
//   - The password never reaches logs or error text: Config logs as "set"/"unset", the URL may
//     not carry user info, and the registry's answers are quoted, never the request.
//   - A schema the registry refuses under its compatibility rules is an *IncompatibleError
//     naming the subject, the level and the fix; it is not retried.
//   - A registry that cannot be reached, or answers 5xx, 408 or 429, is retried with
//     exponential backoff until it answers or the caller's context ends; the error then wraps
//     both the context's error and the last failure. Status says whether the last request
//     failed, since when, and why, for /readyz and the status page.
//   - Other refusals (401/403, a malformed schema, a certificate that does not verify) are
//     returned at once: retrying cannot fix them. ErrUnauthorized marks bad credentials.
package schemareg
