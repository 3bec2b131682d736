package sandchat

import (
	"context"
	"time"
)

// Session is a browser signed in as a user. Its secret lives in an HttpOnly cookie and,
// as a hash, in the store; API clients use tokens instead.
type Session struct {
	ID        int64
	User      *User
	ExpiresAt time.Time
	// Secret is set only on the session just created: the cookie's value.
	Secret string
}

// SessionService is how a person signs in from a browser: an operator or an admin
// makes a one-time login link for a user, and the page that opens it exchanges it for
// a session.
type SessionService interface {
	// CreateLoginLink returns the secret of a new link for the user, usable once until
	// it expires ttl from now; ENOTFOUND for a user that does not exist.
	CreateLoginLink(ctx context.Context, userID int64, ttl time.Duration) (secret string, expiresAt time.Time, err error)
	// ExchangeLoginLink spends a link and starts a session of ttl for its user. A link
	// that is unknown, spent or expired is one EUNAUTHORIZED, whichever it was.
	ExchangeLoginLink(ctx context.Context, secret string, ttl time.Duration) (*Session, error)
	// Session returns the live session a cookie's secret names, or EUNAUTHORIZED.
	Session(ctx context.Context, secret string) (*Session, error)
	// SessionByHash is Session for the secret whose SecretHash is hash: how a ticket
	// checks that the session that made it is still live.
	SessionByHash(ctx context.Context, hash []byte) (*Session, error)
	// EndSession deletes a session: its cookie no longer signs anyone in.
	EndSession(ctx context.Context, id int64) error
}
