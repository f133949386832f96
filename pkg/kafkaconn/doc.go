// Package kafkaconn holds Kafka connection settings and builds every Kafka client the product
// makes from them: cdc's sink, its watermark reader, its status board and preflight, the
// consumer reader, the applier and tidemark-tail. It is a leaf: it imports franz-go and the
// standard library (and pkg/conffile for certificate files), never the sink or a consumer, so a
// consumer does not depend on the producer to connect.
//
// Settings are brokers, Security (TLS and SASL, read from the CDC_KAFKA_TLS* and
// CDC_KAFKA_SASL* variables by ReadSecurityEnv with every problem listed) and the bounds of a
// connection; NewClient applies them and the caller's own options (what to consume, how to
// produce).
package kafkaconn
