package main

import (
	"fmt"
	"strconv"
	"strings"
)

// recordRef names one Kafka record: what an error about a record's data names, and what
// APPLY_SKIP_RECORDS lists (topic:partition:offset) to have the applier pass over it.
type recordRef struct {
	topic     string
	partition int32
	offset    int64
}

func (r recordRef) String() string { return fmt.Sprintf("%s:%d:%d", r.topic, r.partition, r.offset) }

// parseRecordRefs reads a comma-separated list of topic:partition:offset; every problem is
// returned.
func parseRecordRefs(s string) (map[recordRef]bool, []error) {
	var out map[recordRef]bool
	var problems []error
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		// A topic name may not hold ':', so the last two fields are partition and offset.
		i := strings.LastIndex(item, ":")
		j := -1
		if i > 0 {
			j = strings.LastIndex(item[:i], ":")
		}
		if j <= 0 {
			problems = append(problems, fmt.Errorf("%q: want topic:partition:offset", item))
			continue
		}
		p, perr := strconv.ParseInt(item[j+1:i], 10, 32)
		o, oerr := strconv.ParseInt(item[i+1:], 10, 64)
		if perr != nil || oerr != nil || p < 0 || o < 0 {
			problems = append(problems, fmt.Errorf("%q: want topic:partition:offset with a partition and an offset ≥ 0", item))
			continue
		}
		if out == nil {
			out = map[recordRef]bool{}
		}
		out[recordRef{item[:j], int32(p), o}] = true
	}
	return out, problems
}
