package pkgs

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a refusal the user sees as is: a package that is not installable, a
// checksum that does not match, a bound reached.
type Error struct {
	Msg   string
	Bound bool // at one of the package bounds: the fetches after it in the same load would meet it too
	// NotIndexed: the package index has no such project. The answer is kept as a page of
	// the index is, so sessions asking again in a row do not ask the index again.
	NotIndexed bool
}

func (e *Error) Error() string { return e.Msg }

// Errorf makes a refusal the user sees as is.
func Errorf(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

func boundErrorf(format string, a ...any) error {
	return &Error{Msg: fmt.Sprintf(format, a...), Bound: true}
}

// IsBound tells a refusal at one of the package bounds.
func IsBound(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Bound
}

// sourceError is a package source that could not be reached at all.
type sourceError struct{ msg string }

func (e *sourceError) Error() string { return e.msg }

type httpStatusError struct {
	msg    string
	status int
}

func (e *httpStatusError) Error() string { return e.msg }

// unserved tells a package the source could not serve (unreachable, or an HTTP error)
// from one refused for a reason the user can act on (a bound, a checksum).
func unserved(err error) bool {
	var se *sourceError
	var he *httpStatusError
	return errors.As(err, &se) || errors.As(err, &he)
}

// UnservedLine is what a user is told of a package this server could not serve:
// short, and theirs. The operator's side (the source, its error, the settings that fix
// it) goes to the server's log (Load.Ensure) and to `sandchat doctor`.
const UnservedLine = "this server cannot fetch packages; ask its administrator"

// UnservedNote is the line a run's stderr shows for packages it could not be given
// where no failed import says so (a restored session's, say).
func UnservedNote(names []string) string {
	return fmt.Sprintf("[sandbox] %s: %s", strings.Join(names, ", "), UnservedLine)
}

// unservedFix is what the operator is told to set.
const unservedFix = "set SANDCHAT_SANDBOX_PACKAGE_CDN (official, or a mirror's URL) or SANDCHAT_SANDBOX_PACKAGE_DIR (a local mirror)"

func shortNetErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}
