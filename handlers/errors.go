package handlers

import "errors"

// PermanentError marks a message that can never succeed (bad payload, unknown board,
// failed validation). The router poisons these; every other error is retried.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a PermanentError.
func Permanent(err error) error { return &PermanentError{Err: err} }

// IsPermanent reports whether err is, or wraps, a PermanentError.
func IsPermanent(err error) bool {
	if err == nil { // asked of every message handled
		return false
	}
	var p *PermanentError
	return errors.As(err, &p)
}
