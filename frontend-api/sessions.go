package frontendapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
)

// A person signs in from a browser with a one-time login link, BASE/login#t=SECRET:
// the fragment never reaches a server log or a Referer, and opening the link has no
// effect by itself (a link scanner's GET spends nothing): the page POSTs the secret to
// /api/v1/auth/login, which spends it and sets the session cookie. The cookie is
// HttpOnly, SameSite=Lax and Secure when the page is served over TLS. Every request the
// cookie signs in that changes something must come from an allowed origin and carry
// the session's CSRF token in X-CSRF-Token; a socket it signs in must come from an
// allowed origin. Requests with Authorization: Bearer are API clients, as before.

// Cookie names: over TLS the __Host- prefix also binds the cookie to this host and path
// (no Domain attribute can widen it).
const (
	cookieSession       = "sandchat_session"
	cookieSessionSecure = "__Host-sandchat_session"
	// HeaderCSRF carries the session's CSRF token on requests that change something.
	HeaderCSRF = "X-CSRF-Token"
	// localSession holds the id of the session a request is signed in by.
	localSession = "sandchat.session"
)

// How long a login link works, and the session it starts lasts, unless configured.
const (
	DefaultLoginLinkTTL = 15 * time.Minute
	DefaultSessionTTL   = 30 * 24 * time.Hour
)

// EventSessionEnded goes to a user's channel when one of their sessions signs out:
// the sockets it opened are closed.
const EventSessionEnded = "session.ended"

// closeSignedOut closes a socket whose session ended.
const closeSignedOut = 4001

// LoginLimiter bounds sign-in attempts per client address, across nodes
// (redisbus.Limiter).
type LoginLimiter interface {
	AllowKey(ctx context.Context, action, key string) error
}

// LoginURL is the address of a login link: the page at base/login reads the secret from
// the fragment.
func LoginURL(base, secret string) string {
	return strings.TrimRight(base, "/") + "/login#t=" + secret
}

// csrfToken is the session's CSRF token: derived from its secret, so only a page that
// was given it (the session's own answers) knows it, and it ends with the session.
func csrfToken(secret string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("sandchat csrf v1"))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func safeMethod(m string) bool {
	return m == fiber.MethodGet || m == fiber.MethodHead || m == fiber.MethodOptions
}

// sessionCookie is the secret of the request's session cookie, or "".
func sessionCookie(c *fiber.Ctx) string {
	if v := c.Cookies(cookieSessionSecure); v != "" {
		return v
	}
	return c.Cookies(cookieSession)
}

// overTLS reports whether the page is served over TLS: by this server, by a proxy that
// says so, or by the configured public address.
func (s *Server) overTLS(c *fiber.Ctx) bool {
	return c.Protocol() == "https" || strings.HasPrefix(s.cfg.PublicURL, "https://")
}

func (s *Server) setSessionCookie(c *fiber.Ctx, secret string, expires time.Time) {
	name, secure := cookieSession, s.overTLS(c)
	if secure {
		name = cookieSessionSecure
	}
	c.Cookie(&fiber.Cookie{Name: name, Value: secret, Path: "/", Expires: expires, MaxAge: int(time.Until(expires).Seconds()),
		Secure: secure, HTTPOnly: true, SameSite: fiber.CookieSameSiteLaxMode})
}

// clearSessionCookie tells the browser to drop the session cookie, under either name.
func (s *Server) clearSessionCookie(c *fiber.Ctx) {
	secure := s.overTLS(c)
	for _, name := range []string{cookieSession, cookieSessionSecure} {
		if c.Cookies(name) == "" {
			continue
		}
		c.Cookie(&fiber.Cookie{Name: name, Path: "/", Expires: time.Unix(0, 0),
			Secure: secure || name == cookieSessionSecure, HTTPOnly: true, SameSite: fiber.CookieSameSiteLaxMode})
	}
}

// checkOrigin refuses a browser request that does not come from the server's own pages:
// an Origin outside the allowed ones, or (without an Origin) a Sec-Fetch-Site other than
// same-origin. A socket must name its origin.
func (s *Server) checkOrigin(c *fiber.Ctx, requireOrigin bool) error {
	origin := c.Get(fiber.HeaderOrigin)
	switch {
	case origin != "":
		if !slices.Contains(s.cfg.AllowedOrigins, origin) {
			return sandchat.Errorf(sandchat.EFORBIDDEN, "Refused: this request comes from %q, which is not an allowed origin (SANDCHAT_ALLOWED_ORIGINS); "+
				"a browser session acts only for the server's own pages.", origin)
		}
	case requireOrigin:
		return sandchat.Errorf(sandchat.EFORBIDDEN, "Refused: a socket signed in by a browser session must say its Origin.")
	default:
		if site := c.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			return sandchat.Errorf(sandchat.EFORBIDDEN, "Refused: this request comes from another site (Sec-Fetch-Site: %s); "+
				"a browser session acts only for the server's own pages.", site)
		}
	}
	return nil
}

// authenticateSession signs the request in by its session cookie; what changes
// something must come from an allowed origin with the session's CSRF token.
func (s *Server) authenticateSession(c *fiber.Ctx, secret string) error {
	ctx := c.UserContext()
	sess, err := s.sessions.Session(ctx, secret)
	if err != nil {
		if codeOf(err) == sandchat.EUNAUTHORIZED {
			s.clearSessionCookie(c)
		}
		return err
	}
	socket := strings.HasSuffix(c.Path(), "/ws")
	if socket || !safeMethod(c.Method()) {
		if err := s.checkOrigin(c, socket); err != nil {
			return err
		}
	}
	if !safeMethod(c.Method()) && subtle.ConstantTimeCompare([]byte(c.Get(HeaderCSRF)), []byte(csrfToken(secret))) != 1 {
		return sandchat.Errorf(sandchat.EFORBIDDEN, "Refused: a request signed in by a browser session needs its CSRF token in the %s header "+
			"(GET /api/v1/auth/session gives it).", HeaderCSRF)
	}
	c.SetUserContext(sandchat.WithUser(ctx, sess.User))
	c.Locals("user", sess.User)
	c.Locals(localSession, sess.ID)
	c.Locals(localCredential, sandchat.Credential{Kind: sandchat.CredentialSession, Hash: sandchat.SecretHash(secret), ID: sess.ID, ExpiresAt: sess.ExpiresAt})
	return c.Next()
}

// sessionJSON is what the page learns of its session: who, its CSRF token, and until when.
func sessionJSON(sess *sandchat.Session, secret string) fiber.Map {
	return fiber.Map{"user": sess.User, "csrf_token": csrfToken(secret), "expires_at": sess.ExpiresAt}
}

// login exchanges a login link's secret for a session cookie. It comes from the
// server's own page (a foreign page must not sign a visitor into its own account) and
// is counted per client address.
func (s *Server) login(c *fiber.Ctx) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	if err := s.checkOrigin(c, false); err != nil {
		return err
	}
	ctx := c.UserContext()
	if s.logins != nil {
		if err := s.logins.AllowKey(ctx, "logins", s.clientIP(c)); err != nil {
			return err
		}
	}
	var in struct {
		Token string `json:"token"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	sess, err := s.sessions.ExchangeLoginLink(ctx, strings.TrimSpace(in.Token), s.cfg.SessionTTL)
	if err != nil {
		return err
	}
	s.setSessionCookie(c, sess.Secret, sess.ExpiresAt)
	return c.JSON(sessionJSON(sess, sess.Secret))
}

// session tells the page whether its cookie signs it in: {user: null} when not, so a
// page that was never signed in learns it without an error.
func (s *Server) session(c *fiber.Ctx) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	secret := sessionCookie(c)
	if secret == "" {
		return c.JSON(fiber.Map{"user": nil})
	}
	sess, err := s.sessions.Session(c.UserContext(), secret)
	if codeOf(err) == sandchat.EUNAUTHORIZED {
		s.clearSessionCookie(c)
		return c.JSON(fiber.Map{"user": nil})
	}
	if err != nil {
		return err
	}
	return c.JSON(sessionJSON(sess, secret))
}

// logout ends the request's session: its cookie is dropped and the sockets it opened,
// on every node, are closed.
func (s *Server) logout(c *fiber.Ctx) error {
	id, ok := c.Locals(localSession).(int64)
	if !ok {
		return sandchat.Errorf(sandchat.EINVALID, "This request is signed in by an API token: there is no browser session to end.")
	}
	ctx := c.UserContext()
	if err := s.sessions.EndSession(ctx, id); err != nil {
		return err
	}
	s.clearSessionCookie(c)
	data, _ := json.Marshal(map[string]int64{"session_id": id})
	user := sandchat.UserIDFromContext(ctx)
	if err := s.events.PublishUser(ctx, user, conversations.Event{Type: EventSessionEnded, Data: data}); err != nil {
		// The session is gone: a socket it opened that is not told now finds out at its
		// next check of its credential (client.recheck).
		s.log.WarnContext(ctx, "publish session end", "user_id", user, "err", err)
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// createLoginLink is an admin's way to let a user sign in from a browser.
func (s *Server) createLoginLink(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if !sandchat.UserFromContext(ctx).Admin {
		return sandchat.Errorf(sandchat.EFORBIDDEN, "Only admins can make login links.")
	}
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	secret, expires, err := s.sessions.CreateLoginLink(ctx, id, s.cfg.LoginLinkTTL)
	if err != nil {
		return err
	}
	base := s.cfg.PublicURL
	if base == "" {
		base = c.BaseURL()
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"url": LoginURL(base, secret), "expires_at": expires})
}
