package replication

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// parseMessage is pglogrepl.Parse made safe for any input (FuzzDecode found both problems):
// pglogrepl indexes past the end of a truncated message, and allocates a tuple column's declared
// length before checking that the message holds it, so four corrupt bytes could ask for 4 GiB.
// Here a malformed message is an error, never a panic or a huge allocation. Row changes (Insert,
// Update, Delete) never reach pglogrepl: fastChange reads their tuples in place, checking every
// length against the message, and parseMessage refuses them.
func parseMessage(data []byte) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, errors.New("empty message")
	}
	if isRowChange(data[0]) {
		return nil, fmt.Errorf("%q message: row changes are read by fastChange", data[0])
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("malformed %q message of %d bytes", data[0], len(data))
		}
	}()
	return pglogrepl.Parse(data)
}
