package pipeline

import (
	"errors"

	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/pgcat"
)

// FailureUnknown is the class of a failure whose error is not known any more (an export that
// failed before the last restart, restored from its watermark record) or fits no other class.
const FailureUnknown = "permanent error"

// errTopicRefused: Kafka refused to create the export's topic for good (its reason follows), or
// the topic that exists does not fit the table.
var errTopicRefused = errors.New("the table's topic cannot be used")

// failureClass names the kind of permanent error that stopped an export, in words that never
// quote data. An export's error text can quote row values (a value that cannot be encoded is
// shown as it is), so places that must not show row data show the class instead.
func failureClass(err error) string {
	if code, ok := pgcat.SQLState(err); ok {
		return "PostgreSQL error SQLSTATE " + code
	}
	switch {
	case err == nil:
		return FailureUnknown
	case errors.Is(err, errTopicRefused):
		return "Kafka refused the table's topic"
	case errors.Is(err, codec.ErrRecordTooLarge):
		return "a change's record is larger than the record size limit"
	case errors.Is(err, codec.ErrNotRepresentable):
		return "a value cannot be represented in json-with-schema"
	case errors.Is(err, codec.ErrRowShape):
		return "a row does not match the table's columns"
	}
	if _, ok := errors.AsType[*codec.ValueError](err); ok {
		return "a value cannot be encoded"
	}
	return FailureUnknown
}
