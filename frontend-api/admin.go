package frontendapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/conversations/lifecycle"
)

// AdminService is what administrators do to users and their data (lifecycle.Service).
// It checks that the caller is an administrator and records each change itself; the
// routes check first too, so a refusal costs no store.
type AdminService interface {
	Users(ctx context.Context) ([]sandchat.Account, error)
	User(ctx context.Context, id int64) (sandchat.Account, error)
	Disable(ctx context.Context, id int64) (sandchat.Account, error)
	Enable(ctx context.Context, id int64) (sandchat.Account, error)
	Rename(ctx context.Context, id int64, name string) (sandchat.Account, error)
	Delete(ctx context.Context, id int64) error
	Erase(ctx context.Context, id int64) (lifecycle.Erasure, error)
	Export(ctx context.Context, userID int64, w io.Writer) error
	Tokens(ctx context.Context, userID int64) ([]sandchat.Token, error)
	IssueToken(ctx context.Context, userID int64, ttl time.Duration, note string) (sandchat.Token, string, error)
	RevokeToken(ctx context.Context, id int64) (sandchat.Token, error)
	Sessions(ctx context.Context, userID int64) ([]sandchat.WebSession, error)
	RevokeSession(ctx context.Context, id int64) (sandchat.WebSession, error)
	Audit(ctx context.Context, q sandchat.AuditQuery) ([]sandchat.AuditEntry, error)
}

// EventCredentialsRevoked goes to a user's channel when credentials of theirs stop
// working (a token or a browser session revoked, the account disabled, deleted or
// erased): every node closes the sockets they opened, with closeSignedOut.
const EventCredentialsRevoked = "credentials.revoked"

// Sockets closes a user's sockets on every node, through their user channel.
type Sockets struct{ Events UserEvents }

// CloseSockets closes the sockets the credential opened (the token or session its Kind
// and ID name), or all the user's when cred is zero; reason is the close frame's text
// (at most 123 bytes).
func (s Sockets) CloseSockets(ctx context.Context, userID int64, cred sandchat.Credential, reason string) error {
	data := map[string]any{"reason": reason}
	switch cred.Kind {
	case sandchat.CredentialToken:
		data["token_id"] = cred.ID
	case sandchat.CredentialSession:
		data["session_id"] = cred.ID
	}
	raw, _ := json.Marshal(data)
	return s.Events.PublishUser(ctx, userID, conversations.Event{Type: EventCredentialsRevoked, Data: raw})
}

func (s *Server) adminRoutes(v1 fiber.Router) {
	v1.Get("/me/export", func(c *fiber.Ctx) error {
		return s.sendExport(c, sandchat.UserIDFromContext(c.UserContext()))
	})
	a := v1.Group("/admin", func(c *fiber.Ctx) error {
		if err := sandchat.RequireAdmin(c.UserContext()); err != nil {
			return err
		}
		return c.Next()
	})
	a.Get("/users", func(c *fiber.Ctx) error {
		users, err := s.admin.Users(c.UserContext())
		if err != nil {
			return err
		}
		return c.JSON(users)
	})
	a.Get("/users/:id", s.withID(func(c *fiber.Ctx, id int64) (any, error) { return s.admin.User(c.UserContext(), id) }))
	a.Patch("/users/:id", s.withID(s.patchUser))
	a.Delete("/users/:id", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		if err := s.admin.Delete(c.UserContext(), id); err != nil {
			return err
		}
		return c.SendStatus(fiber.StatusNoContent)
	})
	a.Post("/users/:id/erase", s.withID(func(c *fiber.Ctx, id int64) (any, error) { return s.admin.Erase(c.UserContext(), id) }))
	a.Get("/users/:id/export", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		return s.sendExport(c, id)
	})
	a.Get("/tokens", byUser(s.admin.Tokens))
	a.Post("/tokens", s.issueToken)
	a.Post("/tokens/:id/revoke", s.withID(func(c *fiber.Ctx, id int64) (any, error) { return s.admin.RevokeToken(c.UserContext(), id) }))
	a.Get("/sessions", byUser(s.admin.Sessions))
	a.Post("/sessions/:id/revoke", s.withID(func(c *fiber.Ctx, id int64) (any, error) { return s.admin.RevokeSession(c.UserContext(), id) }))
	a.Get("/audit", s.audit)
}

// withID answers with what fn returns for the route's :id, as JSON.
func (s *Server) withID(fn func(c *fiber.Ctx, id int64) (any, error)) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		out, err := fn(c, id)
		if err != nil {
			return err
		}
		return c.JSON(out)
	}
}

// byUser answers with what list gives for the query's user_id, or for everyone.
func byUser[T any](list func(ctx context.Context, userID int64) ([]T, error)) fiber.Handler {
	return func(c *fiber.Ctx) error {
		user, err := queryID(c, "user_id")
		if err != nil {
			return err
		}
		out, err := list(c.UserContext(), user)
		if err != nil {
			return err
		}
		return c.JSON(out)
	}
}

// queryID reads an optional id from the query string: 0 when absent.
func queryID(c *fiber.Ctx, name string) (int64, error) {
	raw := c.Query(name)
	if raw == "" {
		return 0, nil
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, sandchat.Errorf(sandchat.EINVALID, "%s must be a positive id, not %q.", name, raw)
	}
	return id, nil
}

// patchUser renames, disables or enables a user: {"name"?, "disabled"?}.
func (s *Server) patchUser(c *fiber.Ctx, id int64) (any, error) {
	var in struct {
		Name     *string `json:"name"`
		Disabled *bool   `json:"disabled"`
	}
	if err := decode(c, &in); err != nil {
		return nil, err
	}
	if in.Name == nil && in.Disabled == nil {
		return nil, sandchat.Errorf(sandchat.EINVALID, `Give "name" to rename the user, "disabled" (true or false) to disable or enable them, or both.`)
	}
	ctx := c.UserContext()
	var a sandchat.Account
	var err error
	if in.Name != nil {
		if a, err = s.admin.Rename(ctx, id, *in.Name); err != nil {
			return nil, err
		}
	}
	switch {
	case in.Disabled == nil:
	case *in.Disabled:
		a, err = s.admin.Disable(ctx, id)
	default:
		a, err = s.admin.Enable(ctx, id)
	}
	return a, err
}

// issueToken makes a token: {"user_id", "ttl"? (a duration: "720h"), "note"?} → 201
// {token, secret}; the secret is shown this once.
func (s *Server) issueToken(c *fiber.Ctx) error {
	var in struct {
		UserID int64  `json:"user_id"`
		TTL    string `json:"ttl"`
		Note   string `json:"note"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	if in.UserID <= 0 {
		return sandchat.Errorf(sandchat.EINVALID, "user_id names the user the token is for.")
	}
	var ttl time.Duration
	if in.TTL != "" {
		var err error
		if ttl, err = time.ParseDuration(in.TTL); err != nil || ttl <= 0 {
			return sandchat.Errorf(sandchat.EINVALID, "ttl %q is not a positive duration (e.g. 720h); leave it out for a token that never expires.", in.TTL)
		}
	}
	t, secret, err := s.admin.IssueToken(c.UserContext(), in.UserID, ttl, in.Note)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"token": t, "secret": secret})
}

func (s *Server) audit(c *fiber.Ctx) error {
	q := sandchat.AuditQuery{TargetType: c.Query("target_type")}
	var err error
	for name, v := range map[string]*int64{"before": &q.BeforeID, "target_id": &q.TargetID} {
		if *v, err = queryID(c, name); err != nil {
			return err
		}
	}
	if raw := c.Query("limit"); raw != "" {
		if q.Limit, err = strconv.Atoi(raw); err != nil || q.Limit <= 0 {
			return sandchat.Errorf(sandchat.EINVALID, "limit must be a positive number, not %q.", raw)
		}
	}
	if q.TargetID != 0 && q.TargetType == "" {
		return sandchat.Errorf(sandchat.EINVALID, "target_id needs target_type (user, token or session).")
	}
	entries, err := s.admin.Audit(c.UserContext(), q)
	if err != nil {
		return err
	}
	return c.JSON(entries)
}

// sendExport answers with the zip of a user's data. It is written whole to a file of
// its own first (unlinked at once, gone when sent), so a failure while it is made is a
// problem answer rather than a cut archive, however large the data.
func (s *Server) sendExport(c *fiber.Ctx, userID int64) error {
	ctx := c.UserContext()
	// A GET, but not a harmless one: it reads all of someone's data and an
	// administrator's is recorded. A browser's cookie goes with a link another site's
	// page follows (SameSite=Lax lets top-level navigations through), so that page could
	// have an administrator's browser export anyone, on the record as their own act:
	// signed in by a session, it must come from the server's own pages (or be typed in).
	if _, bySession := c.Locals(localSession).(int64); bySession {
		if err := s.checkOrigin(c, false); err != nil {
			return err
		}
	}
	end, err := s.exports.begin(userID)
	if err != nil {
		return err
	}
	sending := false
	defer func() {
		if !sending {
			end()
		}
	}()
	f, err := os.CreateTemp("", "sandchat-export-*.zip")
	if err != nil {
		return s.exportUnwritable(ctx, userID, err)
	}
	_ = os.Remove(f.Name())
	if err := s.admin.Export(ctx, userID, f); err != nil {
		f.Close()
		var pe *fs.PathError
		switch {
		case errors.Is(err, syscall.ENOSPC):
			s.log.WarnContext(ctx, "no room for an export in the temporary directory", "dir", os.TempDir(), "user_id", userID)
			return &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 60,
				Message: "This server has no room left to prepare the export right now; try again later, or ask an administrator."}
		case errors.As(err, &pe) && pe.Path == f.Name():
			return s.exportUnwritable(ctx, userID, err)
		}
		return err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return err
	}
	name := fmt.Sprintf("sandchat-user-%d-%s.zip", userID, time.Now().UTC().Format("20060102-150405"))
	c.Set(fiber.HeaderContentType, "application/zip")
	c.Set(fiber.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	c.Set(fiber.HeaderCacheControl, "no-store")
	// The export counts until it is sent (or the client goes): its file holds the disk
	// till then.
	sending = true
	return c.SendStream(exportFile{File: f, end: end}, int(size)) // fasthttp closes it once it is sent
}

// exportFile is an export being sent; closing it ends the export (exports.begin).
type exportFile struct {
	*os.File
	end func()
}

func (f exportFile) Close() error {
	f.end()
	return f.File.Close()
}

// maxExports is how many exports a node prepares at once: each reads all of a user's
// data (a connection of the node's small Postgres pool while it does), compresses it
// and holds it on the disk until it is sent.
const maxExports = 2

// exports are the exports this node is preparing: one per user at a time, maxExports
// in all. Without a bound, one user asking for their export again and again, without
// waiting, would fill the node's disk with copies of their data.
type exports struct {
	mu    sync.Mutex
	users map[int64]bool // whose export is being prepared
}

// begin counts an export of the user's data in, or refuses it (429) while one is being
// prepared already, or while the node prepares maxExports.
func (e *exports) begin(userID int64) (end func(), err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.users[userID]:
		return nil, &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 30,
			Message: "An export of this user's data is being prepared already; wait for it to finish before asking again."}
	case len(e.users) >= maxExports:
		return nil, &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: 30,
			Message: fmt.Sprintf("This server is preparing %d exports already; try again in a minute.", maxExports)}
	}
	if e.users == nil {
		e.users = map[int64]bool{}
	}
	e.users[userID] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			delete(e.users, userID)
		})
	}, nil
}

// exportUnwritable answers an export the server's temporary directory refused (missing,
// read-only, over a quota): the operator's to fix, so it is logged as an error and the
// caller is told it is not theirs. Left alone, the file system's error reads as a
// connection's (a syscall.Errno is a net.Error) and would be a quiet "try again".
func (s *Server) exportUnwritable(ctx context.Context, userID int64, err error) error {
	s.log.ErrorContext(ctx, "cannot write an export to the temporary directory (TMPDIR)", "dir", os.TempDir(), "user_id", userID, "err", err)
	return &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 60,
		Message: "This server cannot prepare exports right now: its temporary directory cannot be written. An administrator must fix it (the server's log says how it failed)."}
}
