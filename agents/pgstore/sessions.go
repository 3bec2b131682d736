package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

// Prefixes of the browser's secrets, recognisable as tokens are: a login link's, and a
// session cookie's.
const (
	linkPrefix    = "scl_"
	sessionPrefix = "scs_"
)

var _ sandchat.SessionService = (*Users)(nil)

// badLink is the one answer for a link that does not work: whether it was unknown,
// spent or expired is not told to whoever holds it.
func badLink() error {
	return sandchat.Errorf(sandchat.EUNAUTHORIZED, "This sign-in link does not work: it was used already, has expired or was mistyped. Ask for a new one.")
}

func badSession() error {
	return sandchat.Errorf(sandchat.EUNAUTHORIZED, "Your session has ended (signed out or expired); sign in again.")
}

func newSecret(prefix string) (secret string, hash []byte) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	secret = prefix + base64.RawURLEncoding.EncodeToString(raw)
	return secret, sandchat.SecretHash(secret)
}

// wellFormed reports whether s could be a secret with prefix, so nothing else reaches a
// query.
func wellFormed(s, prefix string) bool {
	return strings.HasPrefix(s, prefix) && len(s) == len(prefix)+43
}

// CreateLoginLink stores a new link's hash for the user; a disabled user gets none. An
// admin's or an operator's link is an administrative action: it is recorded.
func (s *Users) CreateLoginLink(ctx context.Context, userID int64, ttl time.Duration) (string, time.Time, error) {
	secret, hash := newSecret(linkPrefix)
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	defer tx.Rollback(ctx)
	var disabled bool
	if err := tx.QueryRow(ctx, `select disabled_at is not null from users where id = $1`, userID).Scan(&disabled); err != nil {
		return "", time.Time{}, pgdb.PgError(err, "User")
	}
	if disabled {
		return "", time.Time{}, sandchat.Errorf(sandchat.ECONFLICT, "User %d is disabled: enable them before making a sign-in link.", userID)
	}
	var expires time.Time
	var id int64
	err = tx.QueryRow(ctx, `insert into login_links (user_id, secret_hash, expires_at)
		values ($1, $2, now() + $3 * interval '1 millisecond') returning id, expires_at`, userID, hash, ttl.Milliseconds()).Scan(&id, &expires)
	if err != nil {
		return "", time.Time{}, pgdb.PgError(err, "User")
	}
	if _, known := sandchat.ActorFromContext(ctx); known {
		if err := pgdb.Audit(ctx, tx, sandchat.ActionLoginLink, sandchat.AuditTargetUser, userID, map[string]any{"link_id": id, "expires_at": expires}); err != nil {
			return "", time.Time{}, err
		}
	}
	return secret, expires, tx.Commit(ctx)
}

// ExchangeLoginLink spends the link and starts the session in one transaction: two
// exchanges of one link at once get one session between them.
func (s *Users) ExchangeLoginLink(ctx context.Context, secret string, ttl time.Duration) (*sandchat.Session, error) {
	if !wellFormed(secret, linkPrefix) {
		return nil, badLink()
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	var userID int64
	var disabled bool
	err = tx.QueryRow(ctx, `update login_links l set used_at = now() from users u
		where l.secret_hash = $1 and l.used_at is null and l.expires_at > now() and u.id = l.user_id
		returning l.user_id, u.disabled_at is not null`, sandchat.SecretHash(secret)).Scan(&userID, &disabled)
	if err != nil {
		if sandchat.ErrorCode(pgdb.PgError(err, "link")) == sandchat.ENOTFOUND {
			return nil, badLink()
		}
		return nil, pgdb.PgError(err, "link")
	}
	if disabled {
		return nil, errDisabled()
	}
	sessionSecret, hash := newSecret(sessionPrefix)
	sess := &sandchat.Session{User: &sandchat.User{}, Secret: sessionSecret}
	u := sess.User
	err = tx.QueryRow(ctx, `insert into web_sessions (user_id, secret_hash, expires_at, last_seen_at)
		values ($1, $2, now() + $3 * interval '1 millisecond', now()) returning id, expires_at`, userID, hash, ttl.Milliseconds()).
		Scan(&sess.ID, &sess.ExpiresAt)
	if err != nil {
		return nil, pgdb.PgError(err, "session")
	}
	if err := tx.QueryRow(ctx, `select id, name, admin, created_at from users where id = $1`, userID).
		Scan(&u.ID, &u.Name, &u.Admin, &u.CreatedAt); err != nil {
		return nil, pgdb.PgError(err, "User")
	}
	return sess, tx.Commit(ctx)
}

// Session resolves a cookie's secret to its live session. last_seen_at is for
// operators, to a minute, as a token's last use is.
func (s *Users) Session(ctx context.Context, secret string) (*sandchat.Session, error) {
	if !wellFormed(secret, sessionPrefix) {
		return nil, badSession()
	}
	return s.SessionByHash(ctx, sandchat.SecretHash(secret))
}

// SessionByHash resolves a session by its secret's hash: every check of a session is
// this one.
func (s *Users) SessionByHash(ctx context.Context, hash []byte) (*sandchat.Session, error) {
	sess := &sandchat.Session{User: &sandchat.User{}}
	u := sess.User
	var stale, disabled bool
	err := s.db.QueryRow(ctx, `select s.id, s.expires_at, coalesce(s.last_seen_at < now() - interval '1 minute', true),
		u.disabled_at is not null, u.id, u.name, u.admin, u.created_at from web_sessions s join users u on u.id = s.user_id
		where s.secret_hash = $1 and s.expires_at > now()`, hash).
		Scan(&sess.ID, &sess.ExpiresAt, &stale, &disabled, &u.ID, &u.Name, &u.Admin, &u.CreatedAt)
	if err != nil {
		if sandchat.ErrorCode(pgdb.PgError(err, "session")) == sandchat.ENOTFOUND {
			return nil, badSession()
		}
		return nil, pgdb.PgError(err, "session")
	}
	if disabled {
		return nil, errDisabled()
	}
	if stale {
		if _, err := s.db.Exec(ctx, `update web_sessions set last_seen_at = now() where id = $1`, sess.ID); err != nil {
			return nil, pgdb.PgError(err, "session")
		}
	}
	return sess, nil
}

// EndSession deletes the session; one already gone is no error.
func (s *Users) EndSession(ctx context.Context, id int64) error {
	_, err := s.db.Exec(ctx, `delete from web_sessions where id = $1`, id)
	return pgdb.PgError(err, "session")
}

// PruneSessions deletes expired links and sessions, which no longer sign anyone in.
func (s *Users) PruneSessions(ctx context.Context) (int64, error) {
	links, err := s.db.Exec(ctx, `delete from login_links where expires_at < now()`)
	if err != nil {
		return 0, pgdb.PgError(err, "link")
	}
	sessions, err := s.db.Exec(ctx, `delete from web_sessions where expires_at < now()`)
	if err != nil {
		return 0, pgdb.PgError(err, "session")
	}
	return links.RowsAffected() + sessions.RowsAffected(), nil
}

// FindUsersByName returns every user with that name, oldest first (names are not
// unique).
func (s *Users) FindUsersByName(ctx context.Context, name string) ([]*sandchat.User, error) {
	rows, err := s.db.Query(ctx, `select id, name, admin, created_at from users where name = $1 order by id`, name)
	if err != nil {
		return nil, pgdb.PgError(err, "User")
	}
	defer rows.Close()
	var out []*sandchat.User
	for rows.Next() {
		u := &sandchat.User{}
		if err := rows.Scan(&u.ID, &u.Name, &u.Admin, &u.CreatedAt); err != nil {
			return nil, pgdb.PgError(err, "User")
		}
		out = append(out, u)
	}
	return out, pgdb.PgError(rows.Err(), "User")
}
