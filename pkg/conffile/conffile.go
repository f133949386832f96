package conffile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxSize is the bound callers use for certificate, key and token files: far more than a CA
// bundle of every public root (about 200 KiB) and small enough to read at every start.
const MaxSize = 1 << 20

// ErrNotRegular is matched (errors.Is) by the error for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is matched (errors.Is) by the error for a file larger than the bound.
var ErrTooLarge = errors.New("file too large")

// Error says why a configured file is refused. Its text starts with the path.
type Error struct {
	Path string
	// Msg is what is wrong, e.g. "is a named pipe, not a regular file".
	Msg string
	Err error // ErrNotRegular, ErrTooLarge, or the error of open or read
}

func (e *Error) Error() string { return e.Path + " " + e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Read returns the contents of the regular file at path, refusing anything else and any file
// larger than limit bytes. It never blocks on a FIFO or a device.
func Read(path string, limit int64) ([]byte, error) {
	f, err := open(path, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &Error{Path: path, Msg: "cannot be read: " + reason(err), Err: err}
	}
	if int64(len(b)) > limit {
		// The file grew after fstat.
		return nil, &Error{Path: path, Msg: fmt.Sprintf("is larger than %d bytes", limit), Err: ErrTooLarge}
	}
	return b, nil
}

// Check reports whether path is a regular file of at most limit bytes that can be opened for
// reading, without reading it and without blocking.
func Check(path string, limit int64) error {
	f, err := open(path, limit)
	if err != nil {
		return err
	}
	return f.Close()
}

// open opens path without blocking and checks its type and size on the open descriptor.
func open(path string, limit int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, &Error{Path: path, Msg: "cannot be opened: " + reason(err), Err: err}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, &Error{Path: path, Msg: "cannot be read: " + reason(err), Err: err}
	}
	if kind := kindOf(st.Mode()); kind != "" {
		f.Close()
		return nil, &Error{Path: path, Msg: "is " + kind + ", not a regular file", Err: ErrNotRegular}
	}
	if st.Size() > limit {
		f.Close()
		return nil, &Error{Path: path, Msg: fmt.Sprintf("is %d bytes, more than the %d allowed", st.Size(), limit), Err: ErrTooLarge}
	}
	return f, nil
}

// kindOf names a file type that is not a regular file ("" for a regular file).
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return ""
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	default:
		return "a special file"
	}
}

// reason is the system's reason without the path that os repeats ("no such file or directory").
func reason(err error) string {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
