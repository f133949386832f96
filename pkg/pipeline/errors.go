package pipeline

import "errors"

// ErrFatal marks errors that retrying cannot fix; Run returns them. Check with errors.Is.
var ErrFatal = errors.New("fatal")

type fatalError struct{ err error }

func (e *fatalError) Error() string   { return e.err.Error() }
func (e *fatalError) Unwrap() []error { return []error{ErrFatal, e.err} }

// fatal marks err as one that retrying cannot fix.
func fatal(err error) error {
	if err == nil || errors.Is(err, ErrFatal) {
		return err
	}
	return &fatalError{err: err}
}
