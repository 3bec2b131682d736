// Package pgstore keeps users, API tokens, browser sign-ins (login links and sessions)
// and agents in Postgres.
package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"

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
	token, err := newToken(ctx, tx, u.ID)
	if err != nil {
		return nil, "", err
	}
	return u, token, tx.Commit(ctx)
}

// CreateToken issues another token for an existing user (the operator's way back in
// when a token is lost).
func (s *Users) CreateToken(ctx context.Context, userID int64) (string, error) {
	return newToken(ctx, s.db, userID)
}

func newToken(ctx context.Context, q pgdb.Querier, userID int64) (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	if _, err := q.Exec(ctx, `insert into api_tokens (user_id, token_hash) values ($1, $2)`, userID, sandchat.SecretHash(token)); err != nil {
		return "", pgdb.PgError(err, "user")
	}
	return token, nil
}

// Authenticate resolves a token. Only its sha256 is looked up, so the lookup's timing
// says nothing about stored tokens.
func (s *Users) Authenticate(ctx context.Context, token string) (*sandchat.User, error) {
	if !strings.HasPrefix(token, tokenPrefix) || len(token) > 128 {
		return nil, sandchat.Errorf(sandchat.EUNAUTHORIZED, "Invalid API token.")
	}
	return s.AuthenticateHash(ctx, sandchat.SecretHash(token))
}

// AuthenticateHash resolves a token by its hash: every check of a token is this one.
func (s *Users) AuthenticateHash(ctx context.Context, hash []byte) (*sandchat.User, error) {
	u := &sandchat.User{}
	var tokenID int64
	var stale bool
	err := s.db.QueryRow(ctx, `select t.id, coalesce(t.last_used_at < now() - interval '1 minute', true),
		u.id, u.name, u.admin, u.created_at from api_tokens t join users u on u.id = t.user_id
		where t.token_hash = $1`, hash).Scan(&tokenID, &stale, &u.ID, &u.Name, &u.Admin, &u.CreatedAt)
	if err != nil {
		if sandchat.ErrorCode(pgdb.PgError(err, "token")) == sandchat.ENOTFOUND {
			return nil, sandchat.Errorf(sandchat.EUNAUTHORIZED, "Invalid API token.")
		}
		return nil, err
	}
	// last_used_at is for operators, to a minute: not a write on every request.
	if stale {
		if _, err := s.db.Exec(ctx, `update api_tokens set last_used_at = now() where id = $1`, tokenID); err != nil {
			return nil, err
		}
	}
	return u, nil
}
