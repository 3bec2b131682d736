package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
	agentstore "github.com/sandchat/sandchat/agents/pgstore"
	"github.com/sandchat/sandchat/conversations/lifecycle"
	convstore "github.com/sandchat/sandchat/conversations/pgstore"
	"github.com/sandchat/sandchat/conversations/redisbus"
	frontendapi "github.com/sandchat/sandchat/frontend-api"
	"github.com/sandchat/sandchat/migrations/pgdb"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/sandbox/pgcold"
	"github.com/sandchat/sandchat/sandbox/redisstore"
	"github.com/sandchat/sandchat/toolkits"
)

// newAdmin wires what administrators do, for the server and the command line alike.
func newAdmin(users *agentstore.Users, store *convstore.Store, agents *agentstore.Agents, python lifecycle.Python, bus *redisbus.Bus, log *slog.Logger) *lifecycle.Service {
	return &lifecycle.Service{Accounts: users, Data: store, Python: python, Agents: agents,
		Sockets: frontendapi.Sockets{Events: bus}, Cancels: bus, Log: log}
}

// startLifecycle starts what keeps data in its bounds on this node: closing the live
// processes of sessions other nodes deleted for good, and retention when it is on.
func (m *Main) startLifecycle(bg context.Context, bus *redisbus.Bus) error {
	if m.Engine != nil {
		go func() {
			if err := bus.ListenForgets(bg, m.node, m.Engine.Drop); err != nil && bg.Err() == nil {
				m.Log.Error("listener for deleted sessions stopped", "err", err)
			}
		}()
	}
	if m.Config.Retention == 0 {
		return nil
	}
	r, err := lifecycle.NewRetention(lifecycle.RetentionConfig{After: m.Config.Retention, Min: m.RetentionMin},
		m.Store, m.sandbox, m.Log.With("component", "retention"))
	if err != nil {
		return fmt.Errorf("SANDCHAT_RETENTION: %w", err)
	}
	m.Retention = r
	go r.Run(bg)
	return nil
}

// osUser names who runs a command, for the audit.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// adminCLI is an administrator's command: the stores, and Redis for what reaches the
// servers (sockets to close, turns to cancel, Python state to delete).
type adminCLI struct {
	ctx    context.Context // the command line's, recorded as such in the audit
	db     *pgxpool.Pool
	rdb    redis.UniversalClient
	engine *sandbox.Engine
	svc    *lifecycle.Service
	stdout io.Writer
	stderr io.Writer
}

func (a *adminCLI) close() {
	if a.engine != nil {
		_ = a.engine.Close()
	}
	if a.rdb != nil {
		_ = a.rdb.Close()
	}
	a.db.Close()
}

// openAdmin opens what an administrator's command needs. The sandbox engine it builds
// is never started: it only deletes sessions' state (Redis, the cold tier) and tells the
// servers to close their live processes of them.
func openAdmin(ctx context.Context, cfg Config, stdout, stderr io.Writer) (*adminCLI, error) {
	db, err := openDB(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	a := &adminCLI{ctx: sandchat.WithCLI(ctx, osUser()), db: db, stdout: stdout, stderr: stderr}
	if a.rdb, _, err = openRedis(ctx, cfg.RedisURL); err != nil {
		a.close()
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store := convstore.New(db, cfg.EventRetention)
	bus := redisbus.New(a.rdb, cfg.RedisPrefix)
	ecfg := cfg.Sandbox.Engine
	st, err := engineStore(a.rdb, ecfg, redisstore.Options{Cold: pgcold.New(pgdb.NewPool(db), ecfg.RedisPrefix, ecfg.SessionTTL), HotBytes: ecfg.HotStateBytes})
	if err != nil {
		a.close()
		return nil, err
	}
	if a.engine, err = sandbox.New(ecfg, st, log); err != nil {
		a.close()
		return nil, err
	}
	python := &toolkits.Sandbox{Engine: a.engine, Store: store, Tools: &toolkits.Service{Conversations: store},
		PerAgentSessions: cfg.Sandbox.PerAgentSessions, Peers: bus, Node: "cli-" + nodeID(), Log: log}
	a.svc = newAdmin(agentstore.NewUsers(db), store, agentstore.NewAgents(db, nil), python, bus, log)
	return a, nil
}

// adminCommand parses an administrator's command: the store settings, what flags adds,
// and nothing left over.
func adminCommand(ctx context.Context, name, help string, args []string, stdout, stderr io.Writer, flags func(fs *flag.FlagSet) func() error) (*adminCLI, error) {
	var cfg Config
	fs := newFlagSet(name, help, stderr)
	finish := cfg.bind(fs)
	check := flags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := finish(); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if check != nil {
		if err := check(); err != nil {
			fs.Usage()
			return nil, err
		}
	}
	return openAdmin(ctx, cfg, stdout, stderr)
}

// need refuses a missing id flag.
func need(name string, v *int64) func() error {
	return func() error {
		if *v <= 0 {
			return fmt.Errorf("--%s is required (a positive id)", name)
		}
		return nil
	}
}

// positive refuses an optional number flag given as zero or less, which would
// otherwise select nothing, or everything, without a word.
func positive[T int | int64](name string, v *T, given func(string) bool) error {
	if given(name) && *v <= 0 {
		return fmt.Errorf("--%s must be a positive number, not %d", name, *v)
	}
	return nil
}

// flagGiven reports, once fs is parsed, whether a flag was on the command line.
func flagGiven(fs *flag.FlagSet) func(string) bool {
	return func(name string) bool {
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
		return given
	}
}

// cliError is an error as an operator reads it: the application's message, or the
// error itself (connection failures and the like).
func cliError(err error) error {
	var e *sandchat.Error
	if errors.As(err, &e) {
		return errors.New(e.Message)
	}
	return err
}

// adminUsage is the help of the administrators' commands.
const adminUsage = `Administration (every change is recorded in the audit, as done by the command line
and the operating-system user who ran it):
  sandchat user list [--json]                  one user a line: id, name, role, state, created, last seen
  sandchat user disable|enable --id N          stop or allow signing in; disabling closes their sockets
                                               and cancels their running turns
  sandchat user rename --id N --name NAME
  sandchat user delete --id N [--erase]        delete an account that owns no conversations or agents
                                               (--erase: erase it instead)
  sandchat user erase --id N                   delete everything of theirs for good (docs/operating.md)
  sandchat user export --id N --out F.zip      their data as JSON and files
  sandchat token list [--user N] [--json]      one token a line: id, user, state, created, last used, expires, note
  sandchat token create --user N [--ttl 720h] [--note TEXT]
                                               prints the new token, alone, on stdout
  sandchat token revoke --id N
  sandchat session list [--user N] [--json]    live browser sessions: id, user, created, last seen, expires
  sandchat session revoke --id N
  sandchat audit list [--user N] [--limit N] [--json]
`

// runAdmin runs the administrators' commands of group (user, token, session, audit);
// false when it is not one.
func runAdmin(ctx context.Context, group string, args []string, stdout, stderr io.Writer) (bool, error) {
	if len(args) == 0 {
		return false, nil
	}
	verb, args := args[0], args[1:]
	cmd, ok := adminCommands[group+" "+verb]
	if !ok {
		return false, nil
	}
	return true, cmd(ctx, args, stdout, stderr)
}

type adminRun func(ctx context.Context, args []string, stdout, stderr io.Writer) error

var adminCommands = map[string]adminRun{
	"user list":      userList,
	"user disable":   userDisable(true),
	"user enable":    userDisable(false),
	"user rename":    userRename,
	"user delete":    userDelete,
	"user erase":     userErase,
	"user export":    userExport,
	"token list":     tokenList,
	"token create":   tokenCreate,
	"token revoke":   tokenRevoke,
	"session list":   sessionList,
	"session revoke": sessionRevoke,
	"audit list":     auditList,
}

// when prints a time for a list: UTC, to the second, or "-".
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// field keeps a list's line one line, its fields split by tabs: a name holding a tab,
// a line break or another control character is quoted.
func field(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// listCommand is an administrator's list: one item a line, its fields split by tabs
// (line gives them), or --json; with byUser, --user N keeps one user's.
func listCommand[T any](name, help string, byUser bool, list func(a *adminCLI, userID int64) ([]T, error), line func(T) []string) adminRun {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		var asJSON bool
		var userID int64
		a, err := adminCommand(ctx, name, help, args, stdout, stderr, func(fs *flag.FlagSet) func() error {
			fs.BoolVar(&asJSON, "json", false, "print the list as JSON")
			if byUser {
				fs.Int64Var(&userID, "user", 0, "only this user's")
			}
			return func() error { return positive("user", &userID, flagGiven(fs)) }
		})
		if err != nil {
			return err
		}
		defer a.close()
		if userID != 0 {
			// A mistyped id would list nothing, which reads as "they have none".
			if _, err := a.svc.User(a.ctx, userID); err != nil {
				return cliError(err)
			}
		}
		items, err := list(a, userID)
		if err != nil {
			return cliError(err)
		}
		if asJSON {
			return printJSON(stdout, items)
		}
		for _, it := range items {
			fmt.Fprintln(stdout, strings.Join(line(it), "\t"))
		}
		return nil
	}
}

var userList = listCommand("user list [--json]", "Lists users, one a line, tab-separated: id, name, admin|user, enabled|disabled, created, last seen (UTC).", false,
	func(a *adminCLI, _ int64) ([]sandchat.Account, error) { return a.svc.Users(a.ctx) },
	func(u sandchat.Account) []string {
		role, state := "user", "enabled"
		if u.Admin {
			role = "admin"
		}
		if u.Disabled {
			state = "disabled"
		}
		return []string{strconv.FormatInt(u.ID, 10), field(u.Name), role, state, when(&u.CreatedAt), when(u.LastSeenAt)}
	})

// byID is an administrator's command on one thing, named by --id (what says which).
func byID(name, help, what string, fn func(a *adminCLI, id int64) error) adminRun {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		var id int64
		a, err := adminCommand(ctx, name+" --id N", help, args, stdout, stderr, func(fs *flag.FlagSet) func() error {
			fs.Int64Var(&id, "id", 0, what)
			return need("id", &id)
		})
		if err != nil {
			return err
		}
		defer a.close()
		return fn(a, id)
	}
}

func userDisable(disable bool) adminRun {
	verb, help, act := "enable", "Lets the user sign in again, with the tokens and browser sessions they had.", (*lifecycle.Service).Enable
	if disable {
		verb, help, act = "disable", "Stops the user from signing in: their requests are refused on every node, their sockets closed and their running turns cancelled.\n"+
			"Nothing of theirs is deleted; `sandchat user enable` undoes it.", (*lifecycle.Service).Disable
	}
	return byID("user "+verb, help, "the user's id (sandchat user list)", func(a *adminCLI, id int64) error {
		u, err := act(a.svc, a.ctx, id)
		if err != nil {
			return cliError(err)
		}
		fmt.Fprintf(a.stderr, "%s (user %d) is %sd.\n", u.Name, u.ID, verb)
		return nil
	})
}

func userRename(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var id int64
	var name string
	a, err := adminCommand(ctx, "user rename --id N --name NAME", "Renames a user.", args, stdout, stderr, func(fs *flag.FlagSet) func() error {
		fs.Int64Var(&id, "id", 0, "the user's id (sandchat user list)")
		fs.StringVar(&name, "name", "", "the new name")
		return func() error {
			if strings.TrimSpace(name) == "" {
				return errors.New("--name is required")
			}
			return need("id", &id)()
		}
	})
	if err != nil {
		return err
	}
	defer a.close()
	if _, err := a.svc.Rename(a.ctx, id, name); err != nil {
		return cliError(err)
	}
	return nil
}

func userDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var id int64
	var erase bool
	a, err := adminCommand(ctx, "user delete --id N [--erase]",
		"Deletes an account: its tokens, browser sessions and memberships go with it, and what it wrote in others' conversations\n"+
			"stays there without its author. It refuses while the user owns conversations or agents; --erase erases the user instead\n"+
			"(sandchat user erase --help).", args, stdout, stderr, func(fs *flag.FlagSet) func() error {
			fs.Int64Var(&id, "id", 0, "the user's id (sandchat user list)")
			fs.BoolVar(&erase, "erase", false, "erase the user and everything of theirs instead")
			return need("id", &id)
		})
	if err != nil {
		return err
	}
	defer a.close()
	if erase {
		return a.erase(id)
	}
	if err := a.svc.Delete(a.ctx, id); err != nil {
		return cliError(err)
	}
	fmt.Fprintf(stderr, "User %d is deleted.\n", id)
	return nil
}

var userErase = byID("user erase",
	"Deletes everything of the user's, for good: each conversation they own with its messages, runs, files and Python state\n"+
		"(in Redis and Postgres, and its live processes on every server), their agents, tokens and browser sessions, the account;\n"+
		"their messages in others' conversations lose their text and author, and their uploads there are deleted.\n"+
		"An erase that stops part way leaves the account disabled: run it again to finish.",
	"the user's id (sandchat user list)", (*adminCLI).erase)

func (a *adminCLI) erase(id int64) error {
	done, err := a.svc.Erase(a.ctx, id)
	if err != nil {
		return cliError(err)
	}
	fmt.Fprintf(a.stderr, "User %d is erased: %d conversations and %d agents deleted, %d messages in others' conversations anonymized, %d uploads there deleted.\n",
		id, done.ConversationsDeleted, done.AgentsDeleted, done.Messages, done.Uploads)
	return nil
}

func userExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var id int64
	var out string
	a, err := adminCommand(ctx, "user export --id N --out F.zip",
		"Writes a zip of the user's data: their account, agents, each conversation they own with its messages, runs (code and\n"+
			"output) and files, and their messages in others' conversations. The export is recorded in the audit.", args, stdout, stderr,
		func(fs *flag.FlagSet) func() error {
			fs.Int64Var(&id, "id", 0, "the user's id (sandchat user list)")
			fs.StringVar(&out, "out", "", "the zip file to write (- for stdout)")
			return func() error {
				if out == "" {
					return errors.New("--out is required")
				}
				return need("id", &id)()
			}
		})
	if err != nil {
		return err
	}
	defer a.close()
	if out == "-" {
		return cliError(a.svc.Export(a.ctx, id, stdout))
	}
	// Written beside its place and renamed once whole: a failed export leaves no file
	// that looks complete.
	f, err := os.CreateTemp(dirOf(out), ".sandchat-export-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := a.svc.Export(a.ctx, id, f); err != nil {
		f.Close()
		return cliError(err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "The data of user %d is in %s.\n", id, out)
	return nil
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}

var tokenList = listCommand("token list [--user N] [--json]",
	"Lists API tokens, one a line, tab-separated: id, user id, user name, active|expired|revoked, created, last used, expires, note.\n"+
		"Revoked and expired tokens are listed too; secrets never are.", true,
	func(a *adminCLI, userID int64) ([]sandchat.Token, error) { return a.svc.Tokens(a.ctx, userID) },
	func(t sandchat.Token) []string {
		return []string{strconv.FormatInt(t.ID, 10), strconv.FormatInt(t.UserID, 10), field(t.UserName), t.State(time.Now()),
			when(&t.CreatedAt), when(t.LastUsedAt), when(t.ExpiresAt), field(t.Note)}
	})

func tokenCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var userID int64
	var ttl time.Duration
	var note string
	a, err := adminCommand(ctx, "token create --user N [--ttl 720h] [--note TEXT]",
		"Makes an API token for a user and prints it, alone, on stdout (shown once).", args, stdout, stderr, func(fs *flag.FlagSet) func() error {
			fs.Int64Var(&userID, "user", 0, "the user's id (sandchat user list)")
			fs.DurationVar(&ttl, "ttl", 0, "how long the token works (e.g. 720h); 0: until revoked")
			fs.StringVar(&note, "note", "", "what the token is for, shown in the list")
			return func() error {
				if ttl < 0 {
					return errors.New("--ttl must not be negative")
				}
				return need("user", &userID)()
			}
		})
	if err != nil {
		return err
	}
	defer a.close()
	t, secret, err := a.svc.IssueToken(a.ctx, userID, ttl, note)
	if err != nil {
		return cliError(err)
	}
	fmt.Fprintln(stdout, secret)
	fmt.Fprintf(stderr, "Token %d of %s, expires %s.\n", t.ID, t.UserName, when(t.ExpiresAt))
	return nil
}

var tokenRevoke = byID("token revoke", "Revokes an API token: its next request is refused on every server, and the sockets it opened are closed.",
	"the token's id (sandchat token list)", func(a *adminCLI, id int64) error {
		t, err := a.svc.RevokeToken(a.ctx, id)
		if err != nil {
			return cliError(err)
		}
		fmt.Fprintf(a.stderr, "Token %d of %s is revoked.\n", t.ID, t.UserName)
		return nil
	})

var sessionList = listCommand("session list [--user N] [--json]",
	"Lists the browser sessions that still sign someone in, one a line, tab-separated: id, user id, user name, created, last seen, expires.", true,
	func(a *adminCLI, userID int64) ([]sandchat.WebSession, error) { return a.svc.Sessions(a.ctx, userID) },
	func(ws sandchat.WebSession) []string {
		return []string{strconv.FormatInt(ws.ID, 10), strconv.FormatInt(ws.UserID, 10), field(ws.UserName), when(&ws.CreatedAt), when(ws.LastSeenAt), when(&ws.ExpiresAt)}
	})

var sessionRevoke = byID("session revoke", "Ends a browser session, as its sign-out would: its cookie signs no one in, and its sockets are closed.",
	"the session's id (sandchat session list)", func(a *adminCLI, id int64) error {
		ws, err := a.svc.RevokeSession(a.ctx, id)
		if err != nil {
			return cliError(err)
		}
		fmt.Fprintf(a.stderr, "Session %d of %s is ended.\n", ws.ID, ws.UserName)
		return nil
	})

func auditList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var q sandchat.AuditQuery
	var asJSON bool
	a, err := adminCommand(ctx, "audit list [--user N] [--limit N] [--before ID] [--json]",
		"Lists administrative actions, newest first, one a line, tab-separated: id, when (UTC), who (user:ID or cli:OS-USER), action, target, details (JSON).",
		args, stdout, stderr, func(fs *flag.FlagSet) func() error {
			fs.Int64Var(&q.TargetID, "user", 0, "only actions on this user")
			fs.IntVar(&q.Limit, "limit", 100, fmt.Sprintf("at most this many (up to %d)", agentstore.MaxAuditPage))
			fs.Int64Var(&q.BeforeID, "before", 0, "only actions older than this id (the next page)")
			fs.BoolVar(&asJSON, "json", false, "print the list as JSON")
			return func() error {
				given := flagGiven(fs)
				return errors.Join(positive("user", &q.TargetID, given), positive("limit", &q.Limit, given), positive("before", &q.BeforeID, given))
			}
		})
	if err != nil {
		return err
	}
	defer a.close()
	if q.TargetID != 0 {
		q.TargetType = sandchat.AuditTargetUser
	}
	entries, err := a.svc.Audit(a.ctx, q)
	if err != nil {
		return cliError(err)
	}
	if asJSON {
		return printJSON(stdout, entries)
	}
	for _, e := range entries {
		target := e.TargetType
		if e.TargetID != 0 {
			target += ":" + strconv.FormatInt(e.TargetID, 10)
		}
		fmt.Fprintf(stdout, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, when(&e.At), field(e.Actor.String()), e.Action, target, e.Details)
	}
	return nil
}
