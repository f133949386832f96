package codec

import (
	"github.com/tidemark/cdc/pkg/change"
)

// DeleteKey appends a delete of a key read back from the topic (before = the key object
// itself, after null) and, when tombstones are on, its tombstone. The pipeline uses it to
// reconcile rows that earlier snapshot attempts published but the current snapshot does not
// contain.
func (e *Encoder) DeleteKey(dst []change.Record, src Source, key []byte) []change.Record {
	e.val = append(e.val[:0], `{"before":`...)
	e.val = append(e.val, key...)
	e.val = append(e.val, `,"after":null`...)
	e.val = e.appendTail(e.val, src, change.OpDelete)
	k := e.own(key)
	lsn := e.lsnText(src.LSN)
	dst = append(dst, change.Record{
		Topic: e.topic, Partition: change.AnyPartition, Key: k, Value: e.own(e.val),
		Headers: e.headers(lsn, change.OpDelete, nil, nil, nil),
	})
	if e.cfg.Tombstones {
		dst = append(dst, change.Record{
			Topic: e.topic, Partition: change.AnyPartition, Key: k,
			Headers: e.headers(lsn, change.OpDelete, nil, nil, nil),
		})
	}
	return dst
}
