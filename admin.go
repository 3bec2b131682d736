package sandchat

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
)

// Account is a user as an administrator sees them: whether they may sign in, and when
// they last did anything (a token's last use or a browser session's last request, to
// the minute).
type Account struct {
	User
	Disabled   bool       `json:"disabled"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	LastSeenAt *time.Time `json:"last_seen_at"`
}

// Token is an API token as an administrator sees it; its secret is shown once, when it
// is made, and never kept.
type Token struct {
	ID         int64      `json:"id"`
	UserID     int64      `json:"user_id"`
	UserName   string     `json:"user_name"`
	Note       string     `json:"note,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// Token states, as State names them.
const (
	TokenActive  = "active"
	TokenExpired = "expired"
	TokenRevoked = "revoked"
)

// State is whether the token signs its user in at now.
func (t Token) State(now time.Time) string {
	switch {
	case t.RevokedAt != nil:
		return TokenRevoked
	case t.ExpiresAt != nil && !t.ExpiresAt.After(now):
		return TokenExpired
	}
	return TokenActive
}

// WebSession is a browser signed in, as an administrator sees it.
type WebSession struct {
	ID         int64      `json:"id"`
	UserID     int64      `json:"user_id"`
	UserName   string     `json:"user_name"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	LastSeenAt *time.Time `json:"last_seen_at"`
}

// Actor is who an administrative action is recorded as done by: a signed-in admin, or
// the command line with the operating-system user who ran it.
type Actor struct {
	UserID int64  `json:"user_id,omitempty"`
	CLI    string `json:"cli,omitempty"`
}

func (a Actor) String() string {
	if a.CLI != "" {
		return "cli:" + a.CLI
	}
	return "user:" + strconv.FormatInt(a.UserID, 10)
}

type cliKey struct{}

// WithCLI returns a context whose administrative actions are recorded as the command
// line's, run by the operating-system user osUser. The command line is trusted as the
// database's owner is: whoever can run it holds the database's credentials.
func WithCLI(ctx context.Context, osUser string) context.Context {
	if osUser == "" {
		osUser = "unknown"
	}
	return context.WithValue(ctx, cliKey{}, osUser)
}

// ActorFromContext is who acts in ctx: the command line, or the signed-in user; false
// for a context with neither.
func ActorFromContext(ctx context.Context) (Actor, bool) {
	if cli, ok := ctx.Value(cliKey{}).(string); ok {
		return Actor{CLI: cli}, true
	}
	if u := UserFromContext(ctx); u != nil {
		return Actor{UserID: u.ID}, true
	}
	return Actor{}, false
}

// RequireAdmin allows what only administrators may do: the command line, or a signed-in
// admin. Anyone else is forbidden; the routes are public knowledge, so there is nothing
// to hide by answering "not found".
func RequireAdmin(ctx context.Context) error {
	if _, cli := ctx.Value(cliKey{}).(string); cli {
		return nil
	}
	if u := UserFromContext(ctx); u != nil && u.Admin {
		return nil
	}
	return Errorf(EFORBIDDEN, "Only administrators may do this.")
}

// AuditEntry is one administrative action on record.
type AuditEntry struct {
	ID         int64           `json:"id"`
	At         time.Time       `json:"at"`
	Actor      Actor           `json:"actor"`
	Action     string          `json:"action"`
	TargetType string          `json:"target_type"`
	TargetID   int64           `json:"target_id,omitempty"`
	Details    json.RawMessage `json:"details"`
}

// AuditQuery selects audit entries, newest first: at most Limit, older than BeforeID
// when set, about one target when TargetType is set.
type AuditQuery struct {
	Limit      int
	BeforeID   int64
	TargetType string
	TargetID   int64
}

// Administrative actions, as the audit names them.
const (
	ActionUserCreate    = "user.create"
	ActionUserDisable   = "user.disable"
	ActionUserEnable    = "user.enable"
	ActionUserRename    = "user.rename"
	ActionUserDelete    = "user.delete"
	ActionUserErase     = "user.erase"
	ActionUserExport    = "user.export"
	ActionLoginLink     = "user.login_link"
	ActionTokenCreate   = "token.create"
	ActionTokenRevoke   = "token.revoke"
	ActionSessionRevoke = "session.revoke"
	AuditTargetUser     = "user"
	AuditTargetToken    = "token"
	AuditTargetSession  = "session"
)
