// Package pgdb is what the Postgres stores share: the Querier they run on, the
// translation of driver errors into sandchat's vocabulary, a pool that applies it to
// every call, and the owner/member queries of agents and conversations. It sits beside
// the schema it queries; only the pgstore adapters import it.
package pgdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandchat/sandchat"
)

// Querier is what the Postgres adapters need of a pool or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PgError translates a driver error into the application vocabulary at the adapter
// boundary: no rows is "not found" (worded with noun), constraint violations are
// invalid input, anything else passes through as internal.
func PgError(err error, noun string) error {
	var pgErr *pgconn.PgError
	var appErr *sandchat.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &appErr):
		return err
	case unreachable(err):
		return sandchat.WithCause(sandchat.Unavailable(sandchat.DepPostgres, err), err)
	case errors.Is(err, pgx.ErrNoRows):
		return sandchat.Errorf(sandchat.ENOTFOUND, "%s not found.", noun)
	case errors.As(err, &pgErr):
		switch pgErr.Code {
		case "23503": // foreign_key_violation
			return sandchat.Errorf(sandchat.EINVALID, "A referenced %s does not exist.", noun)
		case "23505": // unique_violation
			return sandchat.Errorf(sandchat.ECONFLICT, "The %s already exists.", noun)
		case "23514", "22001": // check_violation, string_data_right_truncation
			return sandchat.Errorf(sandchat.EINVALID, "Invalid %s.", noun)
		case "22P05", "22021": // untranslatable_character (NUL), character_not_in_repertoire
			return sandchat.Errorf(sandchat.EINVALID, "The %s contains a NUL character or invalid UTF-8.", noun)
		}
	}
	return err
}

// Shared is a resource that has an owner and members with roles: agents and
// conversations. The rules are sandchat's (CheckRole, CheckGrant); Shared reads the
// roles they judge, in the caller's transaction.
type Shared struct {
	Noun        string // "Agent", for messages
	Table       string // "agents"
	MemberTable string // "agent_members"
	ForeignKey  string // "agent_id"
}

// Role returns the user's role on the resource: owner, editor or viewer. A resource that
// does not exist and one the user has no role on are both "not found", so existence never
// leaks across users.
func (s Shared) Role(ctx context.Context, q Querier, id, userID int64) (string, error) {
	var owner int64
	var role *string
	err := q.QueryRow(ctx, fmt.Sprintf(
		`select r.owner_id, m.role from %s r left join %s m on m.%s = r.id and m.user_id = $2 where r.id = $1`,
		s.Table, s.MemberTable, s.ForeignKey), id, userID).Scan(&owner, &role)
	switch {
	case err != nil:
		return "", PgError(err, s.Noun)
	case owner == userID:
		return sandchat.RoleOwner, nil
	case role != nil:
		return *role, nil
	}
	return "", sandchat.Errorf(sandchat.ENOTFOUND, "%s not found.", s.Noun)
}

// Authorize returns the caller's role and fails unless it is one of want. A viewer
// asking to edit is forbidden; a stranger gets not found.
func (s Shared) Authorize(ctx context.Context, q Querier, id int64, want ...string) (string, error) {
	role, err := s.Role(ctx, q, id, sandchat.UserIDFromContext(ctx))
	if err != nil {
		return "", err
	}
	return role, sandchat.CheckRole(role, s.Noun, want...)
}

// Members lists the resource's members; any role may read them.
func (s Shared) Members(ctx context.Context, q Querier, id int64) ([]sandchat.Member, error) {
	if _, err := s.Authorize(ctx, q, id, sandchat.Anyone...); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, fmt.Sprintf(
		`select m.user_id, u.name, m.role from %s m join users u on u.id = m.user_id where m.%s = $1 order by m.user_id`,
		s.MemberTable, s.ForeignKey), id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sandchat.Member, error) {
		var m sandchat.Member
		return m, r.Scan(&m.UserID, &m.Name, &m.Role)
	})
}

// SetMember grants or changes a member's role; only the owner manages members.
func (s Shared) SetMember(ctx context.Context, q Querier, id, userID int64, role string) (sandchat.Member, error) {
	// A bad role is the request's fault, whoever sends it; the rest needs the owner.
	if err := sandchat.CheckMemberRole(role); err != nil {
		return sandchat.Member{}, err
	}
	if _, err := s.Authorize(ctx, q, id, sandchat.RoleOwner); err != nil {
		return sandchat.Member{}, err
	}
	if err := sandchat.CheckGrant(sandchat.UserIDFromContext(ctx), userID, role); err != nil {
		return sandchat.Member{}, err
	}
	m := sandchat.Member{UserID: userID, Role: role}
	err := q.QueryRow(ctx, fmt.Sprintf(
		`with up as (insert into %s (%s, user_id, role) values ($1, $2, $3)
		   on conflict (%s, user_id) do update set role = excluded.role returning user_id)
		 select u.name from up join users u on u.id = up.user_id`,
		s.MemberTable, s.ForeignKey, s.ForeignKey), id, userID, role).Scan(&m.Name)
	if err != nil {
		return sandchat.Member{}, PgError(err, "user")
	}
	return m, nil
}

// RemoveMember revokes a member's role; only the owner manages members.
func (s Shared) RemoveMember(ctx context.Context, q Querier, id, userID int64) error {
	if _, err := s.Authorize(ctx, q, id, sandchat.RoleOwner); err != nil {
		return err
	}
	tag, err := q.Exec(ctx, fmt.Sprintf(`delete from %s where %s = $1 and user_id = $2`, s.MemberTable, s.ForeignKey), id, userID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return sandchat.Errorf(sandchat.ENOTFOUND, "Member not found.")
	}
	return nil
}

// unreachable reports whether err means Postgres could not be reached or is shutting
// down, as opposed to an answer about the query.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	var ce *pgconn.ConnectError
	switch {
	case errors.As(err, &pgErr):
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03" || c == "53300"
	case errors.As(err, &ce), pgconn.Timeout(err), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return sandchat.IsConnError(err)
}

// Pool is a pgx pool whose errors are translated at the boundary: a Postgres that
// cannot be reached surfaces as EUNAVAILABLE naming Postgres, from every query, scan,
// transaction and commit, so no caller has to remember to translate.
type Pool struct{ P *pgxpool.Pool }

// NewPool wraps p.
func NewPool(p *pgxpool.Pool) *Pool { return &Pool{P: p} }

func connErr(err error) error {
	if err != nil && unreachable(err) {
		return PgError(err, "")
	}
	return err
}

func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := p.P.Exec(ctx, sql, args...)
	return tag, connErr(err)
}

func (p *Pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := p.P.Query(ctx, sql, args...)
	if err != nil {
		return rows, connErr(err)
	}
	return rowsT{rows}, nil
}

func (p *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return rowT{p.P.QueryRow(ctx, sql, args...)}
}

func (p *Pool) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := p.P.Begin(ctx)
	if err != nil {
		return nil, connErr(err)
	}
	return txT{tx}, nil
}

// BeginTx is Begin with options (isolation, read-only).
func (p *Pool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := p.P.BeginTx(ctx, opts)
	if err != nil {
		return nil, connErr(err)
	}
	return txT{tx}, nil
}

func (p *Pool) Ping(ctx context.Context) error { return connErr(p.P.Ping(ctx)) }

type rowT struct{ r pgx.Row }

func (r rowT) Scan(dest ...any) error { return connErr(r.r.Scan(dest...)) }

type rowsT struct{ pgx.Rows }

func (r rowsT) Err() error { return connErr(r.Rows.Err()) }

func (r rowsT) Scan(dest ...any) error { return connErr(r.Rows.Scan(dest...)) }

type txT struct{ pgx.Tx }

func (t txT) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := t.Tx.Exec(ctx, sql, args...)
	return tag, connErr(err)
}

func (t txT) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		return rows, connErr(err)
	}
	return rowsT{rows}, nil
}

func (t txT) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return rowT{t.Tx.QueryRow(ctx, sql, args...)}
}

func (t txT) Commit(ctx context.Context) error { return connErr(t.Tx.Commit(ctx)) }

// Audit records an administrative action in q, the transaction that makes it, so the
// action and its record commit together. The actor is the command line or the signed-in
// user of ctx; a context with neither is refused: no administrative change goes
// unrecorded. details is marshalled to JSON (nil: an empty object).
func Audit(ctx context.Context, q Querier, action, targetType string, targetID int64, details any) error {
	actor, ok := sandchat.ActorFromContext(ctx)
	if !ok {
		return sandchat.Errorf(sandchat.EINTERNAL, "an administrative action (%s) with no actor to record", action)
	}
	raw := []byte("{}")
	if details != nil {
		var err error
		if raw, err = json.Marshal(details); err != nil {
			return err
		}
	}
	var userID *int64
	var cli *string
	if actor.CLI != "" {
		cli = &actor.CLI
	} else {
		userID = &actor.UserID
	}
	var target *int64
	if targetID != 0 {
		target = &targetID
	}
	_, err := q.Exec(ctx, `insert into admin_audit (actor_user_id, actor_cli, action, target_type, target_id, details)
		values ($1, $2, $3, $4, $5, $6)`, userID, cli, action, targetType, target, raw)
	return PgError(err, "audit entry")
}
