package change

import (
	"fmt"
	"strings"
)

// TopicName is the Kafka topic of an export: "<prefix>.<schema>.<table>", with every character
// Kafka does not allow in a topic name (anything but ASCII letters, digits, '.', '_' and '-')
// replaced by '_'. Two exports can sanitise to the same name; CheckTopicCollisions finds them.
func TopicName(prefix string, e ExportID) string {
	return SanitizeTopic(prefix + "." + e.Schema + "." + e.Table)
}

// SanitizeTopic maps a string onto Kafka's legal topic characters, truncated to 249 bytes.
func SanitizeTopic(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 249 {
		b = b[:249]
	}
	return string(b)
}

// CheckTopicCollisions returns an error naming every pair of exports whose topics collide after
// sanitising (Kafka also treats '.' and '_' as colliding in metric names, so those count too).
func CheckTopicCollisions(prefix string, exports []ExportID) error {
	seen := make(map[string]ExportID, len(exports))
	var problems []string
	for _, e := range exports {
		norm := strings.ReplaceAll(TopicName(prefix, e), ".", "_")
		if other, ok := seen[norm]; ok && other != e {
			problems = append(problems, fmt.Sprintf("%s and %s both map to topic %s", other, e, TopicName(prefix, e)))
			continue
		}
		seen[norm] = e
	}
	if len(problems) > 0 {
		return fmt.Errorf("topic name collision: %s; rename a table or use a different CDC_TOPIC_PREFIX", strings.Join(problems, "; "))
	}
	return nil
}
