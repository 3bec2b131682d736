package frontendapi

import (
	"context"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
)

// localCredential holds how the request was signed in (a sandchat.Credential), which a
// ticket it makes carries.
const localCredential = "sandchat.credential"

// filePath is where downloads are, GET filePath+id.
const filePath = "/api/v1/files/"

// ticketQuery reports whether the request may be signed in by a secret in its URL: a
// socket, or a download, which browsers open without headers.
func ticketQuery(c *fiber.Ctx) bool {
	return strings.HasSuffix(c.Path(), "/ws") || (c.Method() == fiber.MethodGet && strings.HasPrefix(c.Path(), filePath))
}

// createTicket makes a ticket for one socket or one download of the caller's, made by
// (and only as good as) the token or session that signs this request in.
func (s *Server) createTicket(c *fiber.Ctx) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	var in struct {
		Use    string `json:"use"`
		FileID int64  `json:"file_id"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	url := ""
	switch {
	case in.Use == sandchat.TicketWebSocket && in.FileID == 0:
		url = "/api/v1/ws"
	case in.Use == sandchat.TicketDownload && in.FileID > 0:
		url = filePath + strconv.FormatInt(in.FileID, 10)
	default:
		return sandchat.Errorf(sandchat.EINVALID, `A ticket is for {"use": %q} or {"use": %q, "file_id": N}.`, sandchat.TicketWebSocket, sandchat.TicketDownload)
	}
	ctx := c.UserContext()
	via, _ := c.Locals(localCredential).(sandchat.Credential)
	t := sandchat.Ticket{UserID: sandchat.UserIDFromContext(ctx), Use: in.Use, FileID: in.FileID, Via: via}
	secret, expires, err := s.tickets.IssueTicket(ctx, t, sandchat.TicketTTL)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"ticket": secret, "expires_at": expires, "url": url + "?ticket=" + secret})
}

// checkCredential checks a credential again, as a request signed in by it would be: the
// token must authenticate, the session be live, and the account enabled. It returns the
// user and the credential, with which token or session it is and when it ends.
func (s *Server) checkCredential(ctx context.Context, cred sandchat.Credential) (*sandchat.User, sandchat.Credential, error) {
	switch cred.Kind {
	case sandchat.CredentialToken:
		return s.users.AuthenticateHash(ctx, cred.Hash)
	case sandchat.CredentialSession:
		sess, err := s.sessions.SessionByHash(ctx, cred.Hash)
		if err != nil {
			return nil, cred, err
		}
		cred.ID, cred.ExpiresAt = sess.ID, sess.ExpiresAt
		return sess.User, cred, nil
	}
	return nil, cred, sandchat.Errorf(sandchat.EUNAUTHORIZED, "This names no sign-in.")
}

// authenticateTicket signs the request in by a ticket: spent at once, it must be for
// this request (a socket, or this file), and what made it must still sign its user in.
// A socket opened by a session's ticket is that session's (its sign-out closes it) and
// must come from an allowed origin, as one the cookie opens.
func (s *Server) authenticateTicket(c *fiber.Ctx, secret string) error {
	ctx := c.UserContext()
	t, err := s.tickets.RedeemTicket(ctx, secret)
	if err != nil {
		return err
	}
	socket := strings.HasSuffix(c.Path(), "/ws")
	if socket && t.Use != sandchat.TicketWebSocket ||
		!socket && (t.Use != sandchat.TicketDownload || c.Path() != filePath+strconv.FormatInt(t.FileID, 10)) {
		return sandchat.Errorf(sandchat.EUNAUTHORIZED, "This ticket was made for another request; it is spent now. Ask for one for this request.")
	}
	user, cred, err := s.checkCredential(ctx, t.Via)
	if err == nil && cred.Kind == sandchat.CredentialSession {
		c.Locals(localSession, cred.ID)
		if socket {
			err = s.checkOrigin(c, true)
		}
	}
	if codeOf(err) == sandchat.EUNAUTHORIZED || err == nil && user.ID != t.UserID {
		return sandchat.Errorf(sandchat.EUNAUTHORIZED, "The token or session that made this ticket no longer signs you in; sign in again.")
	}
	if err != nil {
		return err
	}
	c.SetUserContext(sandchat.WithUser(ctx, user))
	c.Locals("user", user)
	c.Locals(localCredential, cred)
	return c.Next()
}
