package pgdb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/migrations/pgdb"
	"github.com/sandchat/sandchat/migrations/testenv"
)

// TestPgError: driver errors become the application vocabulary at the adapter
// boundary; an unreachable Postgres is EUNAVAILABLE naming it, with Retry-After and
// the driver error still in the chain.
func TestPgError(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name string
		err  error
		code string
	}{
		{"no rows", pgx.ErrNoRows, sandchat.ENOTFOUND},
		{"unique violation", &pgconn.PgError{Code: "23505"}, sandchat.ECONFLICT},
		{"foreign key violation", &pgconn.PgError{Code: "23503"}, sandchat.EINVALID},
		{"NUL in text", &pgconn.PgError{Code: "22P05"}, sandchat.EINVALID},
		{"postgres shutting down", &pgconn.PgError{Code: "57P01"}, sandchat.EUNAVAILABLE},
		{"postgres refused", fmt.Errorf("failed to connect: %w", refused), sandchat.EUNAVAILABLE},
		{"postgres connection cut", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), sandchat.EUNAVAILABLE},
		{"syntax error stays internal", &pgconn.PgError{Code: "42601"}, sandchat.EINTERNAL},
		{"app error passes", sandchat.Errorf(sandchat.EBUSY, "busy"), sandchat.EBUSY},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := pgdb.PgError(tc.err, "thing")
			if c := sandchat.ErrorCode(got); c != tc.code {
				t.Fatalf("code %s, want %s (%v)", c, tc.code, got)
			}
			if tc.code != sandchat.EUNAVAILABLE {
				return
			}
			var ae *sandchat.Error
			errors.As(got, &ae)
			if ae.Dependency != sandchat.DepPostgres || ae.RetryAfter == 0 {
				t.Fatalf("unavailable %+v, want dependency postgres and Retry-After", ae)
			}
			if !errors.Is(got, tc.err) {
				t.Fatalf("the driver error left the chain: %v", got)
			}
		})
	}
}

// TestPoolUnreachable: every call through the Pool of a Postgres that is not there
// answers EUNAVAILABLE naming Postgres, with no translation by the caller.
func TestPoolUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	p, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/none?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	db := pgdb.NewPool(p)
	ctx := context.Background()
	var n int
	_, execErr := db.Exec(ctx, "select 1")
	_, queryErr := db.Query(ctx, "select 1")
	_, beginErr := db.Begin(ctx)
	for name, err := range map[string]error{
		"exec": execErr, "query": queryErr, "begin": beginErr, "ping": db.Ping(ctx),
		"query row": db.QueryRow(ctx, "select 1").Scan(&n),
	} {
		var ae *sandchat.Error
		if !errors.As(err, &ae) || ae.Code != sandchat.EUNAVAILABLE || ae.Dependency != sandchat.DepPostgres {
			t.Errorf("%s: %v, want unavailable naming postgres", name, err)
		}
	}
}

// TestShared: roles are read in the same query as the resource; a stranger and a
// missing resource are both "not found", a viewer asking to write is forbidden, and
// only the owner manages members.
func TestShared(t *testing.T) {
	ctx := context.Background()
	db := pgdb.NewPool(testenv.DB(t))
	share := pgdb.Shared{Noun: "Agent", Table: "agents", MemberTable: "agent_members", ForeignKey: "agent_id"}
	user := func(name string) *sandchat.User {
		u := &sandchat.User{Name: name}
		if err := db.QueryRow(ctx, `insert into users (name) values ($1) returning id`, name).Scan(&u.ID); err != nil {
			t.Fatal(err)
		}
		return u
	}
	owner, editor, viewer, stranger := user("owner"), user("editor"), user("viewer"), user("stranger")
	var agent int64
	if err := db.QueryRow(ctx, `insert into agents (owner_id, name) values ($1, 'a') returning id`, owner.ID).Scan(&agent); err != nil {
		t.Fatal(err)
	}
	as := func(u *sandchat.User) context.Context { return sandchat.WithUser(ctx, u) }
	for _, m := range []struct {
		u    *sandchat.User
		role string
	}{{editor, sandchat.RoleEditor}, {viewer, sandchat.RoleViewer}} {
		if _, err := share.SetMember(as(owner), db, agent, m.u.ID, m.role); err != nil {
			t.Fatalf("grant %s: %v", m.role, err)
		}
	}

	cases := []struct {
		name string
		as   *sandchat.User
		id   int64
		want []string
		code string
	}{
		{"owner writes", owner, agent, sandchat.Editors, ""},
		{"editor writes", editor, agent, sandchat.Editors, ""},
		{"viewer reads", viewer, agent, sandchat.Anyone, ""},
		{"viewer may not write", viewer, agent, sandchat.Editors, sandchat.EFORBIDDEN},
		{"editor may not manage members", editor, agent, []string{sandchat.RoleOwner}, sandchat.EFORBIDDEN},
		{"stranger does not see it", stranger, agent, sandchat.Anyone, sandchat.ENOTFOUND},
		{"missing is not found", owner, agent + 1000, sandchat.Anyone, sandchat.ENOTFOUND},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := share.Authorize(as(tc.as), db, tc.id, tc.want...)
			if c := sandchat.ErrorCode(err); c != tc.code {
				t.Fatalf("code %q, want %q (%v)", c, tc.code, err)
			}
		})
	}

	t.Run("members", func(t *testing.T) {
		ms, err := share.Members(as(viewer), db, agent)
		if err != nil || len(ms) != 2 || ms[0].Role != sandchat.RoleEditor || ms[1].Role != sandchat.RoleViewer || ms[0].Name != "editor" {
			t.Fatalf("members %+v, %v", ms, err)
		}
		if _, err := share.Members(as(stranger), db, agent); sandchat.ErrorCode(err) != sandchat.ENOTFOUND {
			t.Fatalf("a stranger listed members: %v", err)
		}
	})
	t.Run("grants", func(t *testing.T) {
		if _, err := share.SetMember(as(editor), db, agent, stranger.ID, sandchat.RoleViewer); sandchat.ErrorCode(err) != sandchat.EFORBIDDEN {
			t.Fatalf("an editor granted a role: %v", err)
		}
		if _, err := share.SetMember(as(owner), db, agent, owner.ID, sandchat.RoleEditor); sandchat.ErrorCode(err) != sandchat.EINVALID {
			t.Fatalf("the owner became a member: %v", err)
		}
		if _, err := share.SetMember(as(stranger), db, agent, stranger.ID, sandchat.RoleOwner); sandchat.ErrorCode(err) != sandchat.EINVALID {
			t.Fatalf("a bad role was not refused first: %v", err)
		}
		if _, err := share.SetMember(as(owner), db, agent, stranger.ID+1000, sandchat.RoleViewer); sandchat.ErrorCode(err) != sandchat.EINVALID {
			t.Fatalf("a missing user was granted: %v", err)
		}
		if err := share.RemoveMember(as(owner), db, agent, viewer.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := share.Authorize(as(viewer), db, agent, sandchat.Anyone...); sandchat.ErrorCode(err) != sandchat.ENOTFOUND {
			t.Fatalf("a removed member still sees the agent: %v", err)
		}
		if err := share.RemoveMember(as(owner), db, agent, viewer.ID); sandchat.ErrorCode(err) != sandchat.ENOTFOUND {
			t.Fatalf("removing twice: %v", err)
		}
	})
}
