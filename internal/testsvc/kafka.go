package testsvc

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
)

// DeleteTopics deletes every topic whose name starts with prefix.
func DeleteTopics(ctx context.Context, adm *kadm.Client, prefix string) error {
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	var names []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	resps, err := adm.DeleteTopics(ctx, names...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return fmt.Errorf("delete topics %s*: %w", prefix, err)
	}
	return nil
}
