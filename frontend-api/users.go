package frontendapi

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
)

func codeOf(err error) string { return sandchat.ErrorCode(err) }

// authenticate puts the token's user into the request context. WebSockets and file
// downloads, which browsers open without headers, may carry a ticket instead
// (?ticket=, authenticateTicket), or, as a fallback for clients that cannot ask for
// one, the token itself as ?access_token=. Without a token, a browser session's cookie
// signs the request in (authenticateSession).
func (s *Server) authenticate(c *fiber.Ctx) error {
	token := ""
	if h := c.Get(fiber.HeaderAuthorization); h != "" {
		scheme, rest, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return sandchat.Errorf(sandchat.EUNAUTHORIZED, "Use Authorization: Bearer <token>.")
		}
		token = strings.TrimSpace(rest)
	} else if ticketQuery(c) {
		if ticket := c.Query("ticket"); ticket != "" {
			return s.authenticateTicket(c, ticket)
		}
		token = c.Query("access_token")
	}
	if token == "" {
		if secret := sessionCookie(c); secret != "" {
			return s.authenticateSession(c, secret)
		}
	}
	if token == "" {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="sandchat"`)
		return sandchat.Errorf(sandchat.EUNAUTHORIZED, "Sign in first: an API token (Authorization: Bearer <token>) or a browser session is required.")
	}
	ctx := c.UserContext()
	u, cred, err := s.users.AuthenticateHash(ctx, sandchat.SecretHash(token))
	if err != nil {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="sandchat", error="invalid_token"`)
		return err
	}
	c.SetUserContext(sandchat.WithUser(ctx, u))
	c.Locals("user", u)
	c.Locals(localCredential, cred)
	return c.Next()
}

func (s *Server) me(c *fiber.Ctx) error {
	return c.JSON(sandchat.UserFromContext(c.UserContext()))
}

func (s *Server) createUser(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if !sandchat.UserFromContext(ctx).Admin {
		return sandchat.Errorf(sandchat.EFORBIDDEN, "Only admins can create users.")
	}
	var in struct {
		Name  string `json:"name"`
		Admin bool   `json:"admin"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	u, token, err := s.users.CreateUser(ctx, in.Name, in.Admin)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"user": u, "token": token})
}
