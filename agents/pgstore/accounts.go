package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

// What administrators do to accounts, their API tokens and their browser sessions. Each
// method is for administrators only (sandchat.RequireAdmin), and each change is recorded
// in admin_audit in the transaction that makes it (pgdb.Audit).

const accountColumns = `u.id, u.name, u.admin, u.created_at, u.disabled_at,
	greatest((select max(last_used_at) from api_tokens where user_id = u.id),
		(select max(last_seen_at) from web_sessions where user_id = u.id))`

func scanAccount(row pgx.Row, a *sandchat.Account) error {
	if err := row.Scan(&a.ID, &a.Name, &a.Admin, &a.CreatedAt, &a.DisabledAt, &a.LastSeenAt); err != nil {
		return err
	}
	a.Disabled = a.DisabledAt != nil
	return nil
}

// Accounts lists every user, oldest first.
func (s *Users) Accounts(ctx context.Context) ([]sandchat.Account, error) {
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	return list(ctx, s.db, "User", scanAccount, `select `+accountColumns+` from users u order by u.id`)
}

// list runs a query and scans each of its rows with scan.
func list[T any](ctx context.Context, q pgdb.Querier, noun string, scan func(pgx.Row, *T) error, sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, pgdb.PgError(err, noun)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) {
		var v T
		return v, scan(r, &v)
	})
	return out, pgdb.PgError(err, noun)
}

// Account is one user.
func (s *Users) Account(ctx context.Context, id int64) (sandchat.Account, error) {
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return sandchat.Account{}, err
	}
	return account(ctx, s.db, id)
}

func account(ctx context.Context, q pgdb.Querier, id int64) (sandchat.Account, error) {
	var a sandchat.Account
	err := scanAccount(q.QueryRow(ctx, `select `+accountColumns+` from users u where u.id = $1`, id), &a)
	return a, pgdb.PgError(err, "User")
}

// notYourself refuses an administrator's action on their own account that would lock
// them out: another administrator, or the command line, may do it.
func notYourself(ctx context.Context, id int64, what string) error {
	if actor, _ := sandchat.ActorFromContext(ctx); actor.CLI == "" && actor.UserID == id {
		return sandchat.Errorf(sandchat.ECONFLICT, "You cannot %s your own account; another administrator or the command line (sandchat user …) can.", what)
	}
	return nil
}

// adminTx runs fn in a transaction for an administrator, with the user's row locked:
// what fn reads of the user stays true until it commits.
func (s *Users) adminTx(ctx context.Context, userID int64, fn func(tx pgx.Tx, a sandchat.Account) error) error {
	return s.auditedChange(ctx, func(tx pgx.Tx) (bool, error) {
		if _, err := tx.Exec(ctx, `select 1 from users where id = $1 for update`, userID); err != nil {
			return false, pgdb.PgError(err, "User")
		}
		a, err := account(ctx, tx, userID)
		if err != nil {
			return false, err
		}
		return true, fn(tx, a)
	})
}

// SetDisabled disables or enables the account. A disabled account's tokens and browser
// sessions stop signing it in (they are kept, and work again once it is enabled) and it
// gets no sign-in links. Setting what already holds changes and records nothing.
func (s *Users) SetDisabled(ctx context.Context, id int64, disabled bool) (sandchat.Account, error) {
	if disabled {
		if err := notYourself(ctx, id, "disable"); err != nil {
			return sandchat.Account{}, err
		}
	}
	var out sandchat.Account
	err := s.adminTx(ctx, id, func(tx pgx.Tx, a sandchat.Account) error {
		out = a
		if a.Disabled == disabled {
			return nil
		}
		action, set := sandchat.ActionUserEnable, "null"
		if disabled {
			action, set = sandchat.ActionUserDisable, "now()"
		}
		if _, err := tx.Exec(ctx, `update users set disabled_at = `+set+` where id = $1`, id); err != nil {
			return pgdb.PgError(err, "User")
		}
		if err := pgdb.Audit(ctx, tx, action, sandchat.AuditTargetUser, id, nil); err != nil {
			return err
		}
		var err error
		out, err = account(ctx, tx, id)
		return err
	})
	return out, err
}

// RenameUser changes the user's name.
func (s *Users) RenameUser(ctx context.Context, id int64, name string) (sandchat.Account, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return sandchat.Account{}, sandchat.Errorf(sandchat.EINVALID, "name must be 1 to 200 characters.")
	}
	var out sandchat.Account
	err := s.adminTx(ctx, id, func(tx pgx.Tx, a sandchat.Account) error {
		out = a
		if a.Name == name {
			return nil
		}
		if _, err := tx.Exec(ctx, `update users set name = $2 where id = $1`, id, name); err != nil {
			return pgdb.PgError(err, "name")
		}
		if err := pgdb.Audit(ctx, tx, sandchat.ActionUserRename, sandchat.AuditTargetUser, id, map[string]string{"from": a.Name, "to": name}); err != nil {
			return err
		}
		out.Name = name
		return nil
	})
	return out, err
}

// Holdings is what a user owns: what deleting the account alone would take with it.
type Holdings struct {
	Conversations int64 `json:"conversations"`
	Agents        int64 `json:"agents"`
}

func holdings(ctx context.Context, q pgdb.Querier, id int64) (Holdings, error) {
	var h Holdings
	err := q.QueryRow(ctx, `select (select count(*) from conversations where owner_id = $1), (select count(*) from agents where owner_id = $1)`, id).
		Scan(&h.Conversations, &h.Agents)
	return h, pgdb.PgError(err, "User")
}

// DeleteUser deletes the account: its tokens, browser sessions, sign-in links and
// memberships go with it; what it wrote in others' conversations stays there, without
// its author. It refuses while the user owns conversations or agents, which only an
// erase deletes (the lifecycle package): deleting an account never takes data with it
// silently.
func (s *Users) DeleteUser(ctx context.Context, id int64) error {
	if err := notYourself(ctx, id, "delete"); err != nil {
		return err
	}
	return s.adminTx(ctx, id, func(tx pgx.Tx, a sandchat.Account) error {
		h, err := holdings(ctx, tx, id)
		if err != nil {
			return err
		}
		if h.Conversations > 0 || h.Agents > 0 {
			return sandchat.Errorf(sandchat.ECONFLICT, "%s (user %d) owns %s and %s: deleting the account would delete them. "+
				"Erase the user to delete everything of theirs (sandchat user erase --id %d, or POST /api/v1/admin/users/%d/erase), or keep the account disabled.",
				a.Name, id, count(h.Conversations, "conversation"), count(h.Agents, "agent"), id, id)
		}
		return deleteAccount(ctx, tx, id, sandchat.ActionUserDelete, map[string]string{"name": a.Name})
	})
}

// EraseAccount deletes the account of a user whose data was erased (conversations,
// agents, what they wrote elsewhere: conversations/pgstore's EraseAuthor), and takes
// their name, and their tokens' notes, out of the audit's records about them; erased says what the erase did, for
// its own record. It refuses while the user still owns a conversation, which must go
// with its Python state first.
func (s *Users) EraseAccount(ctx context.Context, id int64, erased any) error {
	if err := notYourself(ctx, id, "erase"); err != nil {
		return err
	}
	return s.adminTx(ctx, id, func(tx pgx.Tx, a sandchat.Account) error {
		h, err := holdings(ctx, tx, id)
		if err != nil {
			return err
		}
		if h.Conversations > 0 {
			return sandchat.Errorf(sandchat.ECONFLICT, "User %d still owns %s (made while the erase ran?): erase again.", id, count(h.Conversations, "conversation"))
		}
		// Names, and notes on their tokens, are what the records say of them in words.
		if _, err := tx.Exec(ctx, `update admin_audit set details = details - 'name' - 'from' - 'to' - 'note'
			where (target_type = $1 and target_id = $2) or (target_type = $3 and details->>'user_id' = $2::text)`,
			sandchat.AuditTargetUser, id, sandchat.AuditTargetToken); err != nil {
			return pgdb.PgError(err, "audit entry")
		}
		return deleteAccount(ctx, tx, id, sandchat.ActionUserErase, erased)
	})
}

func deleteAccount(ctx context.Context, tx pgx.Tx, id int64, action string, details any) error {
	if _, err := tx.Exec(ctx, `delete from users where id = $1`, id); err != nil {
		return pgdb.PgError(err, "User")
	}
	return pgdb.Audit(ctx, tx, action, sandchat.AuditTargetUser, id, details)
}

func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

const tokenColumns = `t.id, t.user_id, u.name, t.note, t.created_at, t.last_used_at, t.expires_at, t.revoked_at`

func scanToken(row pgx.Row, t *sandchat.Token) error {
	return row.Scan(&t.ID, &t.UserID, &t.UserName, &t.Note, &t.CreatedAt, &t.LastUsedAt, &t.ExpiresAt, &t.RevokedAt)
}

// Tokens lists API tokens, the user's (userID) or everyone's (0), oldest first:
// revoked and expired ones too, never their secrets.
func (s *Users) Tokens(ctx context.Context, userID int64) ([]sandchat.Token, error) {
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	return list(ctx, s.db, "token", scanToken, `select `+tokenColumns+` from api_tokens t join users u on u.id = t.user_id
		where $1::bigint = 0 or t.user_id = $1 order by t.id`, userID)
}

// MaxTokenTTL bounds a token's life: ten years is as good as never for a person, and a
// larger figure is more likely a typo.
const MaxTokenTTL = 10 * 365 * 24 * time.Hour

// IssueToken makes a new API token for the user, expiring ttl from now (0: never), and
// returns it with its secret, shown this once.
func (s *Users) IssueToken(ctx context.Context, userID int64, ttl time.Duration, note string) (sandchat.Token, string, error) {
	note = strings.TrimSpace(note)
	switch {
	case ttl < 0 || ttl > MaxTokenTTL:
		return sandchat.Token{}, "", sandchat.Errorf(sandchat.EINVALID, "A token's time to live is between 1m and %s, or none (it never expires).", MaxTokenTTL)
	case ttl > 0 && ttl < time.Minute:
		return sandchat.Token{}, "", sandchat.Errorf(sandchat.EINVALID, "A token's time to live is at least 1m.")
	case len(note) > 200:
		return sandchat.Token{}, "", sandchat.Errorf(sandchat.EINVALID, "note must be at most 200 characters.")
	}
	var t sandchat.Token
	var secret string
	err := s.adminTx(ctx, userID, func(tx pgx.Tx, a sandchat.Account) error {
		var err error
		if secret, t, err = newToken(ctx, tx, userID, ttl, note); err != nil {
			return err
		}
		t.UserName = a.Name
		return pgdb.Audit(ctx, tx, sandchat.ActionTokenCreate, sandchat.AuditTargetToken, t.ID,
			map[string]any{"user_id": userID, "expires_at": t.ExpiresAt, "note": note})
	})
	return t, secret, err
}

// RevokeToken revokes a token for good; it stays listed, revoked. Revoking a revoked
// token changes and records nothing.
func (s *Users) RevokeToken(ctx context.Context, id int64) (sandchat.Token, error) {
	var t sandchat.Token
	err := s.auditedChange(ctx, func(tx pgx.Tx) (bool, error) {
		err := scanToken(tx.QueryRow(ctx, `select `+tokenColumns+` from api_tokens t join users u on u.id = t.user_id
			where t.id = $1 for update of t`, id), &t)
		if err != nil || t.RevokedAt != nil {
			return false, pgdb.PgError(err, "Token")
		}
		if err := tx.QueryRow(ctx, `update api_tokens set revoked_at = now() where id = $1 returning revoked_at`, id).Scan(&t.RevokedAt); err != nil {
			return false, pgdb.PgError(err, "Token")
		}
		return true, pgdb.Audit(ctx, tx, sandchat.ActionTokenRevoke, sandchat.AuditTargetToken, id, map[string]int64{"user_id": t.UserID})
	})
	return t, err
}

// auditedChange runs fn in a transaction for an administrator, committing only when fn
// made a change (and recorded it).
func (s *Users) auditedChange(ctx context.Context, fn func(tx pgx.Tx) (changed bool, err error)) error {
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return err
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	changed, err := fn(tx)
	if err != nil || !changed {
		return err
	}
	return tx.Commit(ctx)
}

const webSessionColumns = `s.id, s.user_id, u.name, s.created_at, s.expires_at, s.last_seen_at`

func scanWebSession(row pgx.Row, ws *sandchat.WebSession) error {
	return row.Scan(&ws.ID, &ws.UserID, &ws.UserName, &ws.CreatedAt, &ws.ExpiresAt, &ws.LastSeenAt)
}

// WebSessions lists the browser sessions that still sign someone in, the user's
// (userID) or everyone's (0), oldest first.
func (s *Users) WebSessions(ctx context.Context, userID int64) ([]sandchat.WebSession, error) {
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	return list(ctx, s.db, "session", scanWebSession, `select `+webSessionColumns+` from web_sessions s join users u on u.id = s.user_id
		where s.expires_at > now() and ($1::bigint = 0 or s.user_id = $1) order by s.id`, userID)
}

// RevokeWebSession ends a browser session, as its own sign-out does.
func (s *Users) RevokeWebSession(ctx context.Context, id int64) (sandchat.WebSession, error) {
	var ws sandchat.WebSession
	err := s.auditedChange(ctx, func(tx pgx.Tx) (bool, error) {
		err := scanWebSession(tx.QueryRow(ctx, `with gone as (delete from web_sessions where id = $1 returning *)
			select `+webSessionColumns+` from gone s join users u on u.id = s.user_id`, id), &ws)
		if err != nil {
			return false, pgdb.PgError(err, "Session")
		}
		return true, pgdb.Audit(ctx, tx, sandchat.ActionSessionRevoke, sandchat.AuditTargetSession, id, map[string]int64{"user_id": ws.UserID})
	})
	return ws, err
}

// Record notes an administrative action that changes nothing here (an export), in the
// audit.
func (s *Users) Record(ctx context.Context, action, targetType string, targetID int64, details any) error {
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return err
	}
	return pgdb.Audit(ctx, s.db, action, targetType, targetID, details)
}

// MaxAuditPage bounds one read of the audit.
const MaxAuditPage = 1000

// Audit reads the audit, newest first.
func (s *Users) Audit(ctx context.Context, q sandchat.AuditQuery) ([]sandchat.AuditEntry, error) {
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	q.Limit = min(q.Limit, MaxAuditPage)
	return list(ctx, s.db, "audit entry", scanAuditEntry, `select id, at, coalesce(actor_user_id, 0), coalesce(actor_cli, ''),
		action, target_type, coalesce(target_id, 0), details from admin_audit
		where ($1::bigint = 0 or id < $1) and ($2::text = '' or (target_type = $2 and ($3::bigint = 0 or target_id = $3)))
		order by id desc limit $4`, q.BeforeID, q.TargetType, q.TargetID, q.Limit)
}

func scanAuditEntry(row pgx.Row, e *sandchat.AuditEntry) error {
	var details []byte
	err := row.Scan(&e.ID, &e.At, &e.Actor.UserID, &e.Actor.CLI, &e.Action, &e.TargetType, &e.TargetID, &details)
	e.Details = json.RawMessage(details)
	return err
}
