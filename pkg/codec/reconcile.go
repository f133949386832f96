package codec

import (
	"github.com/tidemark/cdc/pkg/change"
)

// DeleteKey appends a delete of a key read back from the topic (before = the key's columns,
// after null) and, when tombstones are on, its tombstone. The pipeline uses it to reconcile rows
// that earlier snapshot attempts published but the current snapshot does not contain. The
// format reads the key (it wrote it); a key it cannot read is published as a delete anyway.
func (e *Encoder) DeleteKey(dst []change.Record, src Source, key []byte) []change.Record {
	ch := e.change(src, change.OpDelete, nil, nil, nil)
	ch.Key = key
	k, val, err := e.encodeKept(ch)
	if err != nil {
		return dst // no format fails on a key it wrote; a key it did not write is not reconciled
	}
	return e.appendDelete(dst, k, val, e.lsnText(src.LSN), nil, nil)
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
