package sandchat

import (
	"context"
	"time"
)

// User is a person or a service account that holds API tokens.
type User struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
}

type userKey struct{}

// WithUser returns a context that carries the acting user.
func WithUser(ctx context.Context, u *User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFromContext returns the acting user, or nil for a context with none.
func UserFromContext(ctx context.Context) *User {
	u, _ := ctx.Value(userKey{}).(*User)
	return u
}

// UserIDFromContext returns the acting user's id, or 0.
func UserIDFromContext(ctx context.Context) int64 {
	if u := UserFromContext(ctx); u != nil {
		return u.ID
	}
	return 0
}

// Member is a user granted a role on an agent or a conversation.
type Member struct {
	UserID int64  `json:"user_id"`
	Name   string `json:"name"`
	Role   string `json:"role"`
}

// UserService creates users and resolves API tokens to them.
type UserService interface {
	// CreateUser makes a user and a first API token for it; the token is returned once
	// and only its hash is kept. Callers other than the bootstrap path must be admins.
	CreateUser(ctx context.Context, name string, admin bool) (*User, string, error)
	// Authenticate returns the user a token belongs to, or EUNAUTHORIZED.
	Authenticate(ctx context.Context, token string) (*User, error)
	// AuthenticateHash is Authenticate for the token whose SecretHash is hash, with the
	// credential the token is (its id and expiry): how every request signed in by a
	// token is checked, and how a ticket checks that the token that made it still signs
	// its user in. A revoked or expired token, and any token of a disabled account, is
	// EUNAUTHORIZED.
	AuthenticateHash(ctx context.Context, hash []byte) (*User, Credential, error)
}
