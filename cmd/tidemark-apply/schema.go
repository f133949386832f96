package main

import (
	"encoding/json"

	"github.com/tidemark/cdc/pkg/consumer"
)

// schemaOf is a json-with-schema change's Connect schema (nil for json, or until pkg/consumer
// passes it on).
func schemaOf(ch *consumer.Change) json.RawMessage { return nil }
