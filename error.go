// Package sandchat holds the vocabulary every other package shares: the application
// error type with its codes, and the acting user carried in a context.
package sandchat

import (
	"errors"
	"fmt"
)

// Error codes. Each maps to one HTTP status in frontend-api; adapters translate
// driver errors into these at their boundary.
const (
	EINVALID      = "invalid"      // 400: malformed or out-of-range input
	EUNAUTHORIZED = "unauthorized" // 401: no or bad credentials
	EFORBIDDEN    = "forbidden"    // 403: known to the caller, but not theirs to change
	ENOTFOUND     = "not_found"    // 404: absent, or not visible to the caller
	ECONFLICT     = "conflict"     // 409: stale version, one-at-a-time violations
	ETOOLARGE     = "too_large"    // 413: a body or code over its limit
	EBUSY         = "busy"         // 429: a bounded queue is full, a rate limit is hit
	EUNAVAILABLE  = "unavailable"  // 503: a dependency or engine is not running
	EINTERNAL     = "internal"     // 500: a bug or an unexpected failure; detail is never shown
)

// Error is an error meant for the caller: its message is safe to show.
type Error struct {
	Code    string
	Message string
	// RetryAfter, when set on EBUSY, is the number of seconds a client should wait.
	RetryAfter int
}

func (e *Error) Error() string {
	return fmt.Sprintf("sandchat error: code=%s message=%s", e.Code, e.Message)
}

// Errorf returns an application error with a code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of an application error in err's chain, EINTERNAL for any
// other non-nil error and "" for nil.
func ErrorCode(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the caller-safe message of err: the application error's message,
// or a generic one for anything else, whose detail must stay in the logs.
func ErrorMessage(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Message
	}
	return "Internal error."
}
