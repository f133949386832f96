// Package connectcheck checks json-with-schema records the way a strict Kafka Connect reader
// would: the value is {"schema":..,"payload":..} and every payload value has exactly the JSON
// type its schema declares (JsonConverter itself lets some mismatches through). Tests of
// pkg/codec and the Kafka Connect integration test share it.
package connectcheck

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// Check checks one json-with-schema key or value.
func Check(b []byte) error {
	var env struct {
		Schema  map[string]any `json:"schema"`
		Payload any            `json:"payload"`
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&env); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if env.Schema == nil {
		return errors.New("no schema")
	}
	return Payload(env.Schema, env.Payload, "$")
}

// Payload checks v (decoded with json.Decoder.UseNumber) against the Connect schema s; path
// names v in errors.
func Payload(s map[string]any, v any, path string) error {
	if v == nil {
		if s["optional"] != true {
			return fmt.Errorf("%s: null in a required %v", path, s["type"])
		}
		return nil
	}
	typ, _ := s["type"].(string)
	switch typ {
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %v is not a boolean", path, v)
		}
	case "int8", "int16", "int32", "int64":
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: %v is not a number", path, v)
		}
		bitsz := map[string]int{"int8": 8, "int16": 16, "int32": 32, "int64": 64}[typ]
		i, ok := new(big.Int).SetString(n.String(), 10)
		if !ok || i.BitLen() >= bitsz && !(i.Sign() < 0 && new(big.Int).Neg(i).BitLen() == bitsz && new(big.Int).Neg(i).TrailingZeroBits() == uint(bitsz-1)) {
			return fmt.Errorf("%s: %v is not an %s", path, v, typ)
		}
	case "float", "double":
		if _, ok := v.(json.Number); !ok {
			return fmt.Errorf("%s: %v is not a number", path, v)
		}
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: %v is not a string", path, v)
		}
		if s["name"] == "io.debezium.data.Json" {
			if !json.Valid([]byte(v.(string))) {
				return fmt.Errorf("%s: %q is not a JSON document", path, v)
			}
		}
	case "bytes":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: %v is not base64", path, v)
		}
		if _, err := base64.StdEncoding.DecodeString(str); err != nil {
			return fmt.Errorf("%s: %q is not base64: %v", path, str, err)
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an array", path, v)
		}
		items, _ := s["items"].(map[string]any)
		for i, x := range arr {
			if err := Payload(items, x, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case "map":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v is not a map", path, v)
		}
		vals, _ := s["values"].(map[string]any)
		for k, x := range m {
			if err := Payload(vals, x, path+"."+k); err != nil {
				return err
			}
		}
	case "struct":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v is not a struct", path, v)
		}
		fields, _ := s["fields"].([]any)
		known := map[string]bool{}
		for _, f := range fields {
			fs := f.(map[string]any)
			name := fs["field"].(string)
			known[name] = true
			if err := Payload(fs, m[name], path+"."+name); err != nil {
				return err
			}
		}
		for k := range m {
			if !known[k] {
				return fmt.Errorf("%s: field %q is not in the schema", path, k)
			}
		}
	default:
		return fmt.Errorf("%s: unknown schema type %q", path, typ)
	}
	return nil
}

// TestConnectValues pins single conversions against Debezium's definitions.
