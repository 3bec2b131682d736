package pgstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents/pgstore"
	"github.com/sandchat/sandchat/migrations/testenv"
)

// accounts is a store on a schema of its own with an admin, a user, and the contexts
// each acts in.
type accounts struct {
	t        *testing.T
	db       *pgxpool.Pool
	users    *pgstore.Users
	admin    *sandchat.User
	asAdmin  context.Context
	cli      context.Context
	bob      *sandchat.User
	bobToken string
	asBob    context.Context
}

func setupAccounts(t *testing.T) *accounts {
	t.Helper()
	a := &accounts{t: t, db: testenv.DB(t)}
	a.users = pgstore.NewUsers(a.db)
	ctx := context.Background()
	var err error
	if a.admin, _, err = a.users.CreateUser(ctx, "root", true); err != nil {
		t.Fatal(err)
	}
	if a.bob, a.bobToken, err = a.users.CreateUser(ctx, "bob", false); err != nil {
		t.Fatal(err)
	}
	a.asAdmin = sandchat.WithUser(ctx, a.admin)
	a.asBob = sandchat.WithUser(ctx, a.bob)
	a.cli = sandchat.WithCLI(ctx, "operator")
	return a
}

// code is the application error code of err ("" for none).
func code(err error) string { return sandchat.ErrorCode(err) }

func (a *accounts) audit(q sandchat.AuditQuery) []sandchat.AuditEntry {
	a.t.Helper()
	entries, err := a.users.Audit(a.cli, q)
	if err != nil {
		a.t.Fatal(err)
	}
	return entries
}

// TestAccountAdministration: only administrators (a signed-in admin or the command
// line) list, disable, enable, rename and delete accounts; each change is recorded with
// who made it, and an unchanged state records nothing. A disabled account signs in by
// nothing it holds (tokens, browser sessions, sign-in links) until it is enabled.
func TestAccountAdministration(t *testing.T) {
	t.Parallel()
	a := setupAccounts(t)
	ctx := context.Background()

	t.Run("others are refused", func(t *testing.T) {
		for name, err := range map[string]error{
			"list":    func() error { _, err := a.users.Accounts(a.asBob); return err }(),
			"disable": func() error { _, err := a.users.SetDisabled(a.asBob, a.admin.ID, true); return err }(),
			"rename":  func() error { _, err := a.users.RenameUser(a.asBob, a.bob.ID, "boss"); return err }(),
			"delete":  a.users.DeleteUser(a.asBob, a.admin.ID),
			"tokens":  func() error { _, err := a.users.Tokens(a.asBob, 0); return err }(),
			"audit":   func() error { _, err := a.users.Audit(a.asBob, sandchat.AuditQuery{}); return err }(),
			"nobody":  func() error { _, err := a.users.Accounts(ctx); return err }(),
		} {
			if code(err) != sandchat.EFORBIDDEN {
				t.Errorf("%s by a user who is no admin: %v, want forbidden", name, err)
			}
		}
		if entries := a.audit(sandchat.AuditQuery{}); len(entries) != 0 {
			t.Fatalf("refusals were recorded as actions: %+v", entries)
		}
	})

	link, _, err := a.users.CreateLoginLink(ctx, a.bob.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := a.users.ExchangeLoginLink(ctx, mustLink(t, a.users, a.bob.ID), time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("disable and enable", func(t *testing.T) {
		got, err := a.users.SetDisabled(a.asAdmin, a.bob.ID, true)
		if err != nil || !got.Disabled || got.DisabledAt == nil {
			t.Fatalf("disable: %+v %v", got, err)
		}
		if _, err := a.users.Authenticate(ctx, a.bobToken); code(err) != sandchat.EUNAUTHORIZED || !strings.Contains(err.Error(), "disabled") {
			t.Fatalf("a disabled account's token: %v, want unauthorized saying disabled", err)
		}
		if _, err := a.users.Session(ctx, sess.Secret); code(err) != sandchat.EUNAUTHORIZED {
			t.Fatalf("a disabled account's browser session: %v", err)
		}
		if _, err := a.users.ExchangeLoginLink(ctx, link, time.Hour); code(err) != sandchat.EUNAUTHORIZED {
			t.Fatalf("a disabled account's sign-in link: %v", err)
		}
		if _, _, err := a.users.CreateLoginLink(a.asAdmin, a.bob.ID, time.Hour); code(err) != sandchat.ECONFLICT {
			t.Fatalf("a sign-in link for a disabled account: %v, want conflict", err)
		}
		if _, err := a.users.SetDisabled(a.asAdmin, a.bob.ID, true); err != nil {
			t.Fatal(err)
		}
		if _, err := a.users.SetDisabled(a.cli, a.bob.ID, false); err != nil {
			t.Fatal(err)
		}
		if u, err := a.users.Authenticate(ctx, a.bobToken); err != nil || u.ID != a.bob.ID {
			t.Fatalf("the token after enable: %+v %v", u, err)
		}
		if _, err := a.users.Session(ctx, sess.Secret); err != nil {
			t.Fatalf("the browser session after enable: %v", err)
		}
		if _, err := a.users.ExchangeLoginLink(ctx, link, time.Hour); err != nil {
			t.Fatalf("the sign-in link after enable: %v", err)
		}
		entries := a.audit(sandchat.AuditQuery{TargetType: sandchat.AuditTargetUser, TargetID: a.bob.ID})
		var actions []string
		for _, e := range entries {
			if e.Action == sandchat.ActionUserDisable || e.Action == sandchat.ActionUserEnable {
				actions = append(actions, e.Action+" by "+e.Actor.String())
			}
		}
		want := []string{"user.enable by cli:operator", "user.disable by user:" + itoa(a.admin.ID)}
		if strings.Join(actions, ", ") != strings.Join(want, ", ") {
			t.Fatalf("audit %v, want %v (the second disable changed nothing)", actions, want)
		}
	})

	t.Run("an admin cannot lock themselves out", func(t *testing.T) {
		if _, err := a.users.SetDisabled(a.asAdmin, a.admin.ID, true); code(err) != sandchat.ECONFLICT {
			t.Fatalf("self-disable: %v", err)
		}
		if err := a.users.DeleteUser(a.asAdmin, a.admin.ID); code(err) != sandchat.ECONFLICT {
			t.Fatalf("self-delete: %v", err)
		}
	})

	t.Run("rename", func(t *testing.T) {
		if _, err := a.users.RenameUser(a.asAdmin, a.bob.ID, "  "); code(err) != sandchat.EINVALID {
			t.Fatalf("blank name: %v", err)
		}
		got, err := a.users.RenameUser(a.asAdmin, a.bob.ID, "robert")
		if err != nil || got.Name != "robert" {
			t.Fatalf("%+v %v", got, err)
		}
		e := a.audit(sandchat.AuditQuery{Limit: 1})[0]
		if e.Action != sandchat.ActionUserRename || string(e.Details) != `{"to": "robert", "from": "bob"}` {
			t.Fatalf("rename recorded as %s %s", e.Action, e.Details)
		}
		if _, err := a.users.RenameUser(a.asAdmin, 999999, "x"); code(err) != sandchat.ENOTFOUND {
			t.Fatalf("rename of no one: %v", err)
		}
	})

	t.Run("list", func(t *testing.T) {
		list, err := a.users.Accounts(a.asAdmin)
		if err != nil || len(list) != 2 || list[0].ID != a.admin.ID || list[1].Name != "robert" {
			t.Fatalf("%+v %v", list, err)
		}
		if list[1].LastSeenAt == nil || time.Since(*list[1].LastSeenAt) > time.Hour {
			t.Fatalf("bob used his token and his session: last seen %v", list[1].LastSeenAt)
		}
	})

	t.Run("delete refuses while they own data", func(t *testing.T) {
		var conv int64
		if err := a.db.QueryRow(ctx, `insert into conversations (owner_id) values ($1) returning id`, a.bob.ID).Scan(&conv); err != nil {
			t.Fatal(err)
		}
		err := a.users.DeleteUser(a.asAdmin, a.bob.ID)
		if code(err) != sandchat.ECONFLICT || !strings.Contains(err.Error(), "1 conversation") || !strings.Contains(err.Error(), "erase") {
			t.Fatalf("delete of a user owning a conversation: %v", err)
		}
		if _, err := a.db.Exec(ctx, `delete from conversations where id = $1`, conv); err != nil {
			t.Fatal(err)
		}
		if err := a.users.DeleteUser(a.asAdmin, a.bob.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.users.Authenticate(ctx, a.bobToken); code(err) != sandchat.EUNAUTHORIZED {
			t.Fatalf("a deleted user's token: %v", err)
		}
		var left int
		_ = a.db.QueryRow(ctx, `select (select count(*) from api_tokens where user_id = $1) + (select count(*) from web_sessions where user_id = $1)`, a.bob.ID).Scan(&left)
		if left != 0 {
			t.Fatalf("%d tokens and sessions of the deleted user are left", left)
		}
		if e := a.audit(sandchat.AuditQuery{Limit: 1})[0]; e.Action != sandchat.ActionUserDelete || e.TargetID != a.bob.ID {
			t.Fatalf("delete recorded as %+v", e)
		}
	})
}

func mustLink(t *testing.T, users *pgstore.Users, id int64) string {
	t.Helper()
	link, _, err := users.CreateLoginLink(context.Background(), id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return link
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestTokenAdministration: tokens are made with an expiry, listed without their secret,
// revoked for good; an expired or revoked token is refused at once, saying which, and
// the credential a token signs in by names it and when it stops working.
func TestTokenAdministration(t *testing.T) {
	t.Parallel()
	a := setupAccounts(t)
	ctx := context.Background()

	for _, ttl := range []time.Duration{-time.Hour, time.Second, pgstore.MaxTokenTTL + time.Hour} {
		if _, _, err := a.users.IssueToken(a.asAdmin, a.bob.ID, ttl, ""); code(err) != sandchat.EINVALID {
			t.Errorf("ttl %s: %v, want invalid", ttl, err)
		}
	}
	if _, _, err := a.users.IssueToken(a.asAdmin, 999999, 0, ""); code(err) != sandchat.ENOTFOUND {
		t.Fatalf("a token for no one: %v", err)
	}
	tok, secret, err := a.users.IssueToken(a.asAdmin, a.bob.ID, 720*time.Hour, "laptop")
	if err != nil || !strings.HasPrefix(secret, "sct_") || tok.ExpiresAt == nil || tok.UserName != "bob" {
		t.Fatalf("%+v %q %v", tok, secret, err)
	}
	if d := time.Until(*tok.ExpiresAt); d < 719*time.Hour || d > 721*time.Hour {
		t.Fatalf("a 720h token expires in %s", d)
	}
	u, cred, err := a.users.AuthenticateHash(ctx, sandchat.SecretHash(secret))
	if err != nil || u.ID != a.bob.ID || cred.Kind != sandchat.CredentialToken || cred.ID != tok.ID || !cred.ExpiresAt.Equal(*tok.ExpiresAt) {
		t.Fatalf("%+v %+v %v", u, cred, err)
	}
	if _, cred, _ := a.users.AuthenticateHash(ctx, sandchat.SecretHash(a.bobToken)); !cred.ExpiresAt.IsZero() {
		t.Fatalf("the first token never expires, yet its credential says %v", cred.ExpiresAt)
	}

	list, err := a.users.Tokens(a.cli, a.bob.ID)
	if err != nil || len(list) != 2 || list[1].ID != tok.ID || list[1].Note != "laptop" || list[1].LastUsedAt == nil || list[1].State(time.Now()) != sandchat.TokenActive {
		t.Fatalf("bob's tokens: %+v %v", list, err)
	}
	raw, _ := json.Marshal(list)
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), "hash") {
		t.Fatalf("the list shows a secret: %s", raw)
	}
	if all, _ := a.users.Tokens(a.cli, 0); len(all) != 3 {
		t.Fatalf("everyone's tokens: %d, want 3", len(all))
	}

	if _, err := a.db.Exec(ctx, `update api_tokens set expires_at = now() - interval '1 second' where id = $1`, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.users.Authenticate(ctx, secret); code(err) != sandchat.EUNAUTHORIZED || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired token: %v", err)
	}
	first, _ := a.users.Tokens(a.cli, a.bob.ID)
	revoked, err := a.users.RevokeToken(a.asAdmin, first[0].ID)
	if err != nil || revoked.RevokedAt == nil || revoked.State(time.Now()) != sandchat.TokenRevoked {
		t.Fatalf("revoke: %+v %v", revoked, err)
	}
	if _, err := a.users.Authenticate(ctx, a.bobToken); code(err) != sandchat.EUNAUTHORIZED || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("a revoked token: %v", err)
	}
	if again, err := a.users.RevokeToken(a.asAdmin, first[0].ID); err != nil || !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Fatalf("revoking again: %+v %v", again, err)
	}
	if _, err := a.users.RevokeToken(a.asAdmin, 999999); code(err) != sandchat.ENOTFOUND {
		t.Fatalf("revoke of no token: %v", err)
	}
	var actions []string
	for _, e := range a.audit(sandchat.AuditQuery{TargetType: sandchat.AuditTargetToken}) {
		actions = append(actions, e.Action)
	}
	if strings.Join(actions, ",") != "token.revoke,token.create" {
		t.Fatalf("token actions recorded: %v", actions)
	}
}

// TestWebSessionAdministration: an administrator sees the browser sessions that sign
// someone in, and ends one as its sign-out would.
func TestWebSessionAdministration(t *testing.T) {
	t.Parallel()
	a := setupAccounts(t)
	ctx := context.Background()
	one, err := a.users.ExchangeLoginLink(ctx, mustLink(t, a.users, a.bob.ID), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	two, err := a.users.ExchangeLoginLink(ctx, mustLink(t, a.users, a.bob.ID), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.db.Exec(ctx, `insert into web_sessions (user_id, secret_hash, expires_at) values ($1, 'x', now() - interval '1 minute')`, a.bob.ID); err != nil {
		t.Fatal(err)
	}
	list, err := a.users.WebSessions(a.asAdmin, a.bob.ID)
	if err != nil || len(list) != 2 || list[0].ID != one.ID || list[1].ID != two.ID || list[0].UserName != "bob" {
		t.Fatalf("live sessions: %+v %v", list, err)
	}
	ended, err := a.users.RevokeWebSession(a.asAdmin, one.ID)
	if err != nil || ended.ID != one.ID || ended.UserID != a.bob.ID {
		t.Fatalf("%+v %v", ended, err)
	}
	if _, err := a.users.Session(ctx, one.Secret); code(err) != sandchat.EUNAUTHORIZED {
		t.Fatalf("the ended session: %v", err)
	}
	if _, err := a.users.Session(ctx, two.Secret); err != nil {
		t.Fatalf("the other session: %v", err)
	}
	if _, err := a.users.RevokeWebSession(a.asAdmin, one.ID); code(err) != sandchat.ENOTFOUND {
		t.Fatalf("ending it again: %v", err)
	}
	if e := a.audit(sandchat.AuditQuery{Limit: 1})[0]; e.Action != sandchat.ActionSessionRevoke || e.TargetID != one.ID {
		t.Fatalf("recorded as %+v", e)
	}
}

// TestEraseAccount: the account of an erased user goes, and the names the audit kept of
// them leave its records, which stay; an administrative change with no one to record is
// refused.
func TestEraseAccount(t *testing.T) {
	t.Parallel()
	a := setupAccounts(t)
	if _, err := a.users.RenameUser(a.asAdmin, a.bob.ID, "Robert Tables"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.users.IssueToken(a.asAdmin, a.bob.ID, 0, "Robert's phone"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.users.IssueToken(a.asAdmin, a.admin.ID, 0, "root's own"); err != nil {
		t.Fatal(err)
	}
	var conv int64
	if err := a.db.QueryRow(context.Background(), `insert into conversations (owner_id) values ($1) returning id`, a.bob.ID).Scan(&conv); err != nil {
		t.Fatal(err)
	}
	if err := a.users.EraseAccount(a.cli, a.bob.ID, nil); code(err) != sandchat.ECONFLICT {
		t.Fatalf("erasing the account of a user who still owns a conversation: %v", err)
	}
	if _, err := a.db.Exec(context.Background(), `delete from conversations where id = $1`, conv); err != nil {
		t.Fatal(err)
	}
	if err := a.users.EraseAccount(a.cli, a.bob.ID, map[string]int{"conversations_deleted": 1}); err != nil {
		t.Fatal(err)
	}
	entries := a.audit(sandchat.AuditQuery{TargetType: sandchat.AuditTargetUser, TargetID: a.bob.ID})
	if len(entries) != 2 || entries[0].Action != sandchat.ActionUserErase || entries[1].Action != sandchat.ActionUserRename {
		t.Fatalf("%+v", entries)
	}
	all := a.audit(sandchat.AuditQuery{})
	for _, e := range all {
		if strings.Contains(string(e.Details), "Robert") || strings.Contains(string(e.Details), "bob") {
			t.Fatalf("the audit still names the erased user: %s %s", e.Action, e.Details)
		}
	}
	if len(all) != 4 || !strings.Contains(string(all[1].Details), "root's own") {
		t.Fatalf("the erase took what was not the erased user's: %+v", all)
	}
	if _, err := a.users.SetDisabled(context.Background(), a.admin.ID, true); code(err) != sandchat.EFORBIDDEN {
		t.Fatalf("a change with no actor: %v", err)
	}
}
