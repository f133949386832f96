package conffile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(regular, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, make([]byte, 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link-to-fifo")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		wantErr error
		wantMsg string
	}{
		{name: "regular", path: regular},
		{name: "fifo", path: fifo, wantErr: ErrNotRegular, wantMsg: fifo + " is a named pipe, not a regular file"},
		{name: "symlink to fifo", path: link, wantErr: ErrNotRegular, wantMsg: "is a named pipe"},
		{name: "character device", path: "/dev/zero", wantErr: ErrNotRegular, wantMsg: "/dev/zero is a character device, not a regular file"},
		{name: "directory", path: dir, wantErr: ErrNotRegular, wantMsg: "is a directory"},
		{name: "too large", path: big, wantErr: ErrTooLarge, wantMsg: "is 2048 bytes, more than the 1024 allowed"},
		{name: "missing", path: filepath.Join(dir, "nope"), wantErr: os.ErrNotExist, wantMsg: "cannot be opened: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			var b []byte
			var err error
			go func() {
				defer close(done)
				b, err = Read(tt.path, 1024)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("Read(%s) blocked", tt.path)
			}
			if tt.wantErr == nil {
				if err != nil || string(b) != "pem" {
					t.Fatalf("Read = %q, %v; want pem", b, err)
				}
				if err := Check(tt.path, 1024); err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Read error %v; want %v containing %q", err, tt.wantErr, tt.wantMsg)
			}
			if err := Check(tt.path, 1024); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Check error %v; want %v", err, tt.wantErr)
			}
		})
	}
}
