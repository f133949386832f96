package preflight

import (
	"encoding/base64"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/schemareg"
)

func TestCheckSchemaRegistry(t *testing.T) {
	const password = "registry-s3cr3t"
	open := srfake.New(srfake.WithGlobalCompat(sr.CompatBackward))
	defer open.Close()
	locked := srfake.New(srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+password))))
	defer locked.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()

	tests := []struct {
		name     string
		cfg      schemareg.Config
		want     []string // each line's mark and a part of it, in order
		wantFail bool
	}{
		{"unset", schemareg.Config{}, nil, false},
		{"reachable", schemareg.Config{URL: open.URL()},
			[]string{"✓ schema registry: not encrypted (http://), on this host",
				"✓ schema registry " + open.URL() + " reachable without authentication; compatibility level of new subjects: BACKWARD"}, false},
		{"credentials accepted", schemareg.Config{URL: locked.URL(), Username: "alice", Password: password},
			[]string{"✓ schema registry: not encrypted", "✓ schema registry " + locked.URL() + " reachable as alice"}, false},
		{"credentials refused", schemareg.Config{URL: locked.URL(), Username: "alice", Password: "wrong-" + password},
			[]string{"✓ schema registry: not encrypted", `✗ schema registry ` + locked.URL() + ` answers, but refused the credentials of user "alice"`}, true},
		{"unreachable", schemareg.Config{URL: closed},
			[]string{"✓ schema registry: not encrypted", "✗ schema registry " + closed + ": "}, true},
		{"plaintext over the network", schemareg.Config{URL: "http://registry.invalid:8081"},
			[]string{"! schema registry: not encrypted (http://): the schemas cross the network in plaintext", "✗ schema registry http://registry.invalid:8081: "}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &checker{cfg: pipeline.Config{ConnectTimeout: 2 * time.Second}, registry: tt.cfg}
			p.schemaRegistry(t.Context())
			var lines []string
			failed := false
			for _, l := range p.lines {
				mark := "✓"
				switch {
				case !l.ok:
					mark, failed = "✗", true
				case l.warn:
					mark = "!"
				}
				lines = append(lines, mark+" "+l.what)
				if strings.Contains(l.what+l.fix, password) {
					t.Errorf("line %q (fix %q) shows the password", l.what, l.fix)
				}
				if !l.ok && l.fix == "" {
					t.Errorf("failed line %q has no fix", l.what)
				}
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("lines:\n%s\nwant %d", strings.Join(lines, "\n"), len(tt.want))
			}
			for i, want := range tt.want {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("line %d = %q, want it to start with %q", i, lines[i], want)
				}
			}
			if failed != tt.wantFail {
				t.Errorf("failed = %v, want %v", failed, tt.wantFail)
			}
		})
	}
}
