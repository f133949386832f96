package codec

import (
	"bytes"
	"encoding/json"

	"github.com/tidemark/cdc/pkg/change"
)

// DeleteKey appends a delete of a key read back from the topic (before = the key object
// itself, after null) and, when tombstones are on, its tombstone. The pipeline uses it to
// reconcile rows that earlier snapshot attempts published but the current snapshot does not
// contain.
func (e *Encoder) DeleteKey(dst []change.Record, src Source, key []byte) []change.Record {
	e.dims = e.dims[:0]
	before := key
	if e.keyHead != nil {
		// json-with-schema: before is the key's payload (its fields are the key columns of the
		// value schema; the others are optional).
		before = keyPayload(e.keyHead, key)
	}
	e.val = append(e.val[:0], e.valHead...)
	e.val = append(e.val, `{"before":`...)
	e.val = append(e.val, before...)
	e.val = append(e.val, `,"after":null`...)
	e.val = e.appendTail(e.val, src, change.OpDelete)
	if e.valHead != nil {
		e.val = append(e.val, '}')
	}
	k := e.own(key)
	lsn := e.lsnText(src.LSN)
	return e.appendDelete(dst, k, e.own(e.val), lsn, nil, nil)
}

// appendDelete appends a delete record of key with value, and its tombstone when the encoder
// writes them; oldKey and newKey name a key change the delete belongs to (nil: none).
func (e *Encoder) appendDelete(dst []change.Record, key, value, lsn, oldKey, newKey []byte) []change.Record {
	dst = append(dst, change.Record{
		Topic: e.topic, Partition: change.AnyPartition, Key: key, Value: value,
		Headers: e.headers(lsn, change.OpDelete, oldKey, newKey, nil),
	})
	if e.cfg.Tombstones {
		dst = append(dst, change.Record{
			Topic: e.topic, Partition: change.AnyPartition, Key: key,
			Headers: e.headers(lsn, change.OpDelete, oldKey, newKey, nil),
		})
	}
	return dst
}

// keyPayload returns the payload of a json-with-schema key: the bytes after head when the key was
// written with this schema, else its "payload" member, else the key itself (a key written in the
// plain JSON format is already the object of key columns).
func keyPayload(head, key []byte) []byte {
	if bytes.HasPrefix(key, head) && len(key) > len(head) && key[len(key)-1] == '}' {
		return key[len(head) : len(key)-1]
	}
	var k struct {
		Payload json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(key, &k) == nil && len(k.Payload) > 0 {
		return k.Payload
	}
	return key
}
