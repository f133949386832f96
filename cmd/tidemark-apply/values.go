package main

import (
	"errors"

	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/formats"
)

// Values reach PostgreSQL as text parameters of the target column's type ($n::<type>, sent in
// text format): PostgreSQL's own input function reads them. The record's format reads each
// value (format.Decoder, in the format's package): by the record's own schema when it carries
// one (json-with-schema's Connect schema: format.Field), else by the target column's type
// (Decoder.AppendText: plain JSON carries no types).

// appendText appends the text PostgreSQL reads for col from a column's value raw: under its
// field f of the record's schema when there is one, else as dec reads a value of col's type. ok
// is false for SQL NULL (nothing appended). A value beyond PostgreSQL's limits is a permanent
// error.
func appendText(dst, raw []byte, col *column, f format.Field, dec format.Decoder) (_ []byte, ok bool, err error) {
	if f != nil {
		dst, ok, err = f.AppendText(dst, raw)
	} else {
		dst, ok, err = dec.AppendText(dst, raw, &col.Column)
	}
	if errors.Is(err, format.ErrBeyondPostgres) {
		err = permanent{err}
	}
	return dst, ok, err
}

// permanent marks err as errPermanent without changing its text.
type permanent struct{ error }

func (p permanent) Unwrap() error      { return p.error }
func (permanent) Is(target error) bool { return target == errPermanent }

// defaultDecoder reads the steps that name no decoder (made by tests): the default format's.
var defaultDecoder = formats.All[0].Decoder()
