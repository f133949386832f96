package consumer

import (
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/formats"
	"github.com/tidemark/cdc/pkg/format/jsonscan"
)

// header is one record header.
type header = kgo.RecordHeader

// errEnvelope is wrapped by the error of a record that is not a Tidemark envelope.
var errEnvelope = format.ErrEnvelope

// decodeChange reads one data record through the decoder of its format (pkg/format/formats
// recognizes it from the value), and the headers the envelope layer writes. rec is a buffer the
// caller reuses; ch keeps slices of key, value and headers (no copy).
func decodeChange(ch *Change, rec *format.Record, decs *formats.Decoders, e change.ExportID, topic string, partition int32, offset int64, key, value []byte, headers []header) error {
	*ch = Change{Export: e, Topic: topic, Partition: partition, Offset: offset}
	dec := decs.For(value)
	if err := dec.Decode(rec, key, value); err != nil {
		return fmt.Errorf("%s[%d] offset %d: %w", topic, partition, offset, err)
	}
	ch.Op, ch.Key, ch.Before, ch.After, ch.Schema, ch.Decoder = rec.Op, rec.Key, rec.Before, rec.After, rec.Schema, dec
	s := &rec.Source
	ch.Source = Source{LSN: s.LSN, TxID: s.TxID, Sequence: s.Sequence, Snapshot: s.Snapshot, Attempt: s.Attempt,
		DB: s.DB, Schema: s.Schema, Table: s.Table, TsMs: s.TsMs}
	for _, h := range headers {
		switch h.Key {
		case codec.HeaderUnchanged:
			if err := json.Unmarshal(h.Value, &ch.Unchanged); err != nil {
				return fmt.Errorf("%s[%d] offset %d: %w: header %s is not a JSON array of names", topic, partition, offset, errEnvelope, codec.HeaderUnchanged)
			}
		case codec.HeaderOldKey:
			ch.OldKey = dec.Key(h.Value)
		case codec.HeaderNewKey:
			ch.NewKey = dec.Key(h.Value)
		}
	}
	return nil
}

// Fields calls fn with the name and the raw JSON value of each field of the JSON object obj (a
// Change's Key, Before or After), in order, without copying: the name is valid only during the
// call, the value as long as obj. It reports whether obj is one well-formed object; fields
// whose names carry escapes are skipped.
func Fields(obj []byte, fn func(name string, value []byte)) bool { return jsonscan.EachField(obj, fn) }
