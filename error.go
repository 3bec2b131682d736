// Package sandchat holds the vocabulary every other package shares: the application
// error type with its codes, the acting user carried in a context, the services that
// sign users in (API tokens; login links and browser sessions), and the role rules
// of owners and members. It imports no driver: the Postgres side of those rules lives
// in migrations/pgdb, beside the schema.
package sandchat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
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

// ShutdownError is the cause of what the server stops as it shuts down (the contexts
// of the turns it cuts off): code that ran under such a context tells it from a user's
// stop by its type.
type ShutdownError struct{ Reason string }

func (e *ShutdownError) Error() string { return e.Reason }

// Error is an error meant for the caller: its message is safe to show.
type Error struct {
	Code    string
	Message string
	// RetryAfter, when set on EBUSY or EUNAVAILABLE, is the number of seconds a client
	// should wait.
	RetryAfter int
	// Dependency names the part that is down on EUNAVAILABLE ("postgres", "redis",
	// "sandbox"), so clients and operators see which one without reading logs.
	Dependency string
}

func (e *Error) Error() string {
	return fmt.Sprintf("sandchat error: code=%s message=%s", e.Code, e.Message)
}

// Errorf returns an application error with a code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Dependencies an EUNAVAILABLE error can name.
const (
	DepPostgres = "postgres"
	DepRedis    = "redis"
)

// Unavailable is the error for a dependency that cannot be reached: the caller should
// retry after a few seconds, and is told which part is down.
func Unavailable(dep string, cause error) *Error {
	name := map[string]string{DepPostgres: "The database (Postgres)", DepRedis: "The event and session store (Redis)"}[dep]
	if name == "" {
		name = "A backing service"
	}
	return &Error{Code: EUNAVAILABLE, RetryAfter: 2, Dependency: dep,
		Message: name + " is unavailable right now; nothing was lost, try again in a few seconds."}
}

// IsConnError reports whether err is a failure to reach a server (refused, reset,
// closed, timed out) rather than an answer from it.
func IsConnError(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	// A bare syscall.Errno is a net.Error too: a file's ENOENT or EACCES reached no server.
	if errors.As(err, &ne) {
		if _, errno := ne.(syscall.Errno); !errno {
			return true
		}
	}
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	msg := err.Error()
	for _, s := range []string{"connection refused", "connection reset", "broken pipe", "conn closed",
		"closed pool", "connection pool timeout", "redis: client is closed", "i/o timeout", "no such host"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// RedisError translates a go-redis error at an adapter boundary: a Redis that cannot be
// reached is EUNAVAILABLE naming Redis; anything else passes through.
func RedisError(err error) error {
	var e *Error
	if err == nil || errors.As(err, &e) || errors.Is(err, context.Canceled) {
		return err
	}
	if RedisNotNow(err) {
		return WithCause(Unavailable(DepRedis, err), err)
	}
	return err
}

// redisNotNowCodes are the error codes a Redis answers while it cannot serve for a
// moment and will again without anyone's help: a dataset loading, a Cluster between a
// master's failure and its replica's promotion, a slot migrating, a replica not yet
// promoted or a master just demoted (the client's map is stale until it reloads).
var redisNotNowCodes = []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "NOREPLICAS"}

// RedisNotNow reports whether err means that Redis cannot be reached or cannot serve
// right now: a connection failure, a deadline, or one of the codes above. The code is
// the first word of a Redis error reply, the protocol's own way to type it.
func RedisNotNow(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if IsConnError(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	found := false
	walkErrors(err, func(e error) {
		code, _, _ := strings.Cut(e.Error(), " ")
		for _, c := range redisNotNowCodes {
			found = found || code == c
		}
	})
	return found
}

// walkErrors calls fn on err and every error it wraps, joined ones included.
func walkErrors(err error, fn func(error)) {
	if err == nil {
		return
	}
	fn(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walkErrors(u.Unwrap(), fn)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkErrors(e, fn)
		}
	}
}

// WithCause returns app with the driver error that caused it kept in the chain: callers
// see app (its code and message), logs and errors.Is see the cause.
func WithCause(app *Error, cause error) error { return &wrapped{app: app, cause: cause} }

type wrapped struct {
	app   *Error
	cause error
}

func (w *wrapped) Error() string   { return w.app.Error() + ": " + w.cause.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.app, w.cause} }

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
