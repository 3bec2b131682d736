// Package pgstore keeps users, API tokens, browser sign-ins (login links and sessions)
// and agents in Postgres.
package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

// tokenPrefix makes tokens recognisable in logs and secret scanners.
const tokenPrefix = "sct_"

// Users implements sandchat.UserService.
type Users struct{ db *pgdb.Pool }

// NewUsers returns the user store.
func NewUsers(db *pgxpool.Pool) *Users { return &Users{db: pgdb.NewPool(db)} }

var _ sandchat.UserService = (*Users)(nil)

// CreateUser makes a user and its first token. Admin rights are checked by the caller:
// the command line creates the first admin with no user in the context.
func (s *Users) CreateUser(ctx context.Context, name string, admin bool) (*sandchat.User, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return nil, "", sandchat.Errorf(sandchat.EINVALID, "name must be 1 to 200 characters.")
	}
	if caller := sandchat.UserFromContext(ctx); caller != nil && !caller.Admin {
		return nil, "", sandchat.Errorf(sandchat.EFORBIDDEN, "Only admins can create users.")
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, "", err
	}
	defer tx.Rollback(ctx)
	u := &sandchat.User{Name: name, Admin: admin}
	if err := tx.QueryRow(ctx, `insert into users (name, admin) values ($1, $2) returning id, created_at`,
		name, admin).Scan(&u.ID, &u.CreatedAt); err != nil {
		return nil, "", pgdb.PgError(err, "user")
	}
	token, _, err := newToken(ctx, tx, u.ID, 0, "")
	if err != nil {
		return nil, "", err
	}
	// The first admin is made by an operator's command or by `make run` (both say who
	// they are), or by a test's setup, which has no one to record.
	if _, known := sandchat.ActorFromContext(ctx); known {
		if err := pgdb.Audit(ctx, tx, sandchat.ActionUserCreate, sandchat.AuditTargetUser, u.ID, map[string]any{"name": name, "admin": admin}); err != nil {
			return nil, "", err
		}
	}
	return u, token, tx.Commit(ctx)
}

// newToken stores a new token of userID, expiring ttl from now (0: never), and returns
// its secret, shown once.
func newToken(ctx context.Context, q pgdb.Querier, userID int64, ttl time.Duration, note string) (string, sandchat.Token, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", sandchat.Token{}, err
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	var expires *int64
	if ttl > 0 {
		ms := ttl.Milliseconds()
		expires = &ms
	}
	t := sandchat.Token{UserID: userID, Note: note}
	err := q.QueryRow(ctx, `insert into api_tokens (user_id, token_hash, note, expires_at)
		values ($1, $2, $3, now() + $4 * interval '1 millisecond') returning id, created_at, expires_at`,
		userID, sandchat.SecretHash(token), note, expires).Scan(&t.ID, &t.CreatedAt, &t.ExpiresAt)
	if err != nil {
		return "", t, pgdb.PgError(err, "user")
	}
	return token, t, nil
}

// Authenticate resolves a token to its user.
func (s *Users) Authenticate(ctx context.Context, token string) (*sandchat.User, error) {
	if !strings.HasPrefix(token, tokenPrefix) || len(token) > 128 {
		return nil, sandchat.Errorf(sandchat.EUNAUTHORIZED, "Invalid API token.")
	}
	u, _, err := s.AuthenticateHash(ctx, sandchat.SecretHash(token))
	return u, err
}

// AuthenticateHash resolves a token by its hash, to its user and the credential it is:
// every check of a token is this one. Only the sha256 is looked up, so the lookup's
// timing says nothing about stored tokens. Nothing is cached: a token revoked, expired
// or whose account was disabled is refused by the next request on every node.
func (s *Users) AuthenticateHash(ctx context.Context, hash []byte) (*sandchat.User, sandchat.Credential, error) {
	cred := sandchat.Credential{Kind: sandchat.CredentialToken, Hash: hash}
	u := &sandchat.User{}
	var stale, revoked, expired, disabled bool
	var expires *time.Time
	err := s.db.QueryRow(ctx, `select t.id, coalesce(t.last_used_at < now() - interval '1 minute', true),
		t.revoked_at is not null, coalesce(t.expires_at <= now(), false), t.expires_at, u.disabled_at is not null,
		u.id, u.name, u.admin, u.created_at from api_tokens t join users u on u.id = t.user_id
		where t.token_hash = $1`, hash).Scan(&cred.ID, &stale, &revoked, &expired, &expires, &disabled, &u.ID, &u.Name, &u.Admin, &u.CreatedAt)
	if err != nil {
		if sandchat.ErrorCode(pgdb.PgError(err, "token")) == sandchat.ENOTFOUND {
			return nil, cred, sandchat.Errorf(sandchat.EUNAUTHORIZED, "Invalid API token.")
		}
		return nil, cred, pgdb.PgError(err, "token")
	}
	switch {
	case revoked:
		return nil, cred, sandchat.Errorf(sandchat.EUNAUTHORIZED, "This API token was revoked.")
	case expired:
		return nil, cred, sandchat.Errorf(sandchat.EUNAUTHORIZED, "This API token expired at %s.", expires.UTC().Format(time.RFC3339))
	case disabled:
		return nil, cred, errDisabled()
	}
	if expires != nil {
		cred.ExpiresAt = *expires
	}
	// last_used_at is for operators, to a minute: not a write on every request.
	if stale {
		if _, err := s.db.Exec(ctx, `update api_tokens set last_used_at = now() where id = $1`, cred.ID); err != nil {
			return nil, cred, pgdb.PgError(err, "token")
		}
	}
	return u, cred, nil
}

// errDisabled refuses whatever signs in a disabled account.
func errDisabled() error {
	return sandchat.Errorf(sandchat.EUNAUTHORIZED, "This account is disabled; an administrator can enable it again.")
}
