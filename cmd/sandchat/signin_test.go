package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// browserClient is a browser signed in by a session cookie: it sends the cookie, the
// session's CSRF token and its page's Origin the way the web client does, each of
// which a case may leave out or change.
type browserClient struct {
	t      *testing.T
	base   string
	cookie *http.Cookie
	csrf   string
}

// send makes a request as the browser; extra headers win over its own (an empty value
// drops one).
func (b *browserClient) send(method, path string, body any, extra map[string]string) (*http.Response, []byte) {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, b.base+path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.cookie != nil {
		req.AddCookie(b.cookie)
	}
	req.Header.Set("Origin", b.base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if b.csrf != "" && method != "GET" {
		req.Header.Set("X-CSRF-Token", b.csrf)
	}
	for k, v := range extra {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, raw
}

// sessionCookieOf is the session cookie a response sets, or nil.
func sessionCookieOf(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if strings.HasSuffix(c.Name, "sandchat_session") {
			return c
		}
	}
	return nil
}

type signedIn struct {
	User struct {
		ID   int64
		Name string
	}
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// exchange opens a login link as the web client does: a POST of its secret from the
// server's own page. It returns the response, and the browser signed in by it.
func exchange(t *testing.T, base, link string, extra map[string]string) (*http.Response, []byte, *browserClient) {
	t.Helper()
	b := &browserClient{t: t, base: base}
	secret := link[strings.LastIndex(link, "#t=")+len("#t="):]
	resp, raw := b.send("POST", "/api/v1/auth/login", map[string]string{"token": secret}, extra)
	if resp.StatusCode == 200 {
		var s signedIn
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		b.cookie, b.csrf = sessionCookieOf(resp), s.CSRFToken
	}
	return resp, raw, b
}

// mintLink is an admin's POST /api/v1/users/{id}/login-link.
func mintLink(admin *client, userID int64) string {
	admin.t.Helper()
	var out struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	admin.must(201, "POST", fmt.Sprintf("/api/v1/users/%d/login-link", userID), nil, &out)
	if !strings.HasPrefix(out.URL, admin.base+"/login#t=scl_") || time.Until(out.ExpiresAt) > 16*time.Minute || time.Until(out.ExpiresAt) < 14*time.Minute {
		admin.t.Fatalf("login link %+v: want %s/login#t=scl_… working for 15 minutes", out, admin.base)
	}
	return out.URL
}

// TestSignIn: a one-time login link signs a browser in with an HttpOnly session cookie;
// what the cookie signs in that changes something needs the session's CSRF token and the
// server's own origin; API tokens work as before; signing out ends the session and its
// sockets; exchanges are counted per client address.
func TestSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node()
	base := "http://" + m.Addr()
	admin, _ := m.user(t, "admin", true)
	lena, lenaID := m.user(t, "lena", false)
	ctx := context.Background()

	t.Run("a link signs in once, with an HttpOnly SameSite=Lax cookie", func(t *testing.T) {
		link := mintLink(admin, lenaID)
		resp, raw, b := exchange(t, base, link, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("exchange: %d %s", resp.StatusCode, raw)
		}
		c := b.cookie
		if c == nil || c.Name != "sandchat_session" || !strings.HasPrefix(c.Value, "scs_") || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode ||
			c.Path != "/" || c.Secure || c.MaxAge < 29*24*3600 {
			t.Fatalf("session cookie %+v (Set-Cookie %q)", c, resp.Header.Values("Set-Cookie"))
		}
		if resp.Header.Get("Cache-Control") != "no-store" || b.csrf == "" || strings.Contains(string(raw), c.Value) {
			t.Fatalf("answer %s (Cache-Control %q): want the CSRF token, never the cookie's secret", raw, resp.Header.Get("Cache-Control"))
		}
		resp, raw = b.send("GET", "/api/v1/me", nil, nil)
		if resp.StatusCode != 200 || !strings.Contains(string(raw), `"name":"lena"`) {
			t.Fatalf("me by cookie: %d %s", resp.StatusCode, raw)
		}
		resp, raw = b.send("GET", "/api/v1/auth/session", nil, nil)
		var s signedIn
		_ = json.Unmarshal(raw, &s)
		if resp.StatusCode != 200 || s.User.Name != "lena" || s.CSRFToken != b.csrf {
			t.Fatalf("session: %d %s", resp.StatusCode, raw)
		}
		if resp, raw, _ := exchange(t, base, link, nil); resp.StatusCode != 401 || sessionCookieOf(resp) != nil {
			t.Fatalf("the link worked twice: %d %s", resp.StatusCode, raw)
		}
	})

	t.Run("a wrong, spent or expired link gets one answer", func(t *testing.T) {
		spent := mintLink(admin, lenaID)
		if resp, raw, _ := exchange(t, base, spent, nil); resp.StatusCode != 200 {
			t.Fatalf("exchange: %d %s", resp.StatusCode, raw)
		}
		expired := mintLink(admin, lenaID)
		if _, err := m.DB.Exec(ctx, `update login_links set expires_at = now() - interval '1 second'
			where secret_hash = sha256(convert_to($1, 'UTF8'))`, expired[strings.Index(expired, "scl_"):]); err != nil {
			t.Fatal(err)
		}
		fresh := mintLink(admin, lenaID)
		wrong := fresh[:len(fresh)-4] + "AAAA" // one link's secret, mistyped
		answers := map[string]string{}
		for name, link := range map[string]string{"spent": spent, "expired": expired, "mistyped": wrong, "not a link": base + "/login#t=hello",
			"an API token": base + "/login#t=" + lena.token} {
			resp, raw, _ := exchange(t, base, link, nil)
			if resp.StatusCode != 401 || sessionCookieOf(resp) != nil {
				t.Fatalf("%s link: %d %s", name, resp.StatusCode, raw)
			}
			answers[name] = problem(t, raw)
		}
		for name, detail := range answers {
			if detail != answers["spent"] {
				t.Errorf("the %s link is told %q, the spent one %q: the answer says which part was wrong", name, detail, answers["spent"])
			}
		}
		// The mistyped one's original still works: a wrong guess spends nothing.
		if resp, raw, _ := exchange(t, base, fresh, nil); resp.StatusCode != 200 {
			t.Fatalf("exchange after a wrong guess: %d %s", resp.StatusCode, raw)
		}
	})

	t.Run("over TLS the cookie is Secure and bound to the host", func(t *testing.T) {
		resp, raw, b := exchange(t, base, mintLink(admin, lenaID), map[string]string{"X-Forwarded-Proto": "https"})
		if resp.StatusCode != 200 {
			t.Fatalf("exchange: %d %s", resp.StatusCode, raw)
		}
		if c := b.cookie; c == nil || c.Name != "__Host-sandchat_session" || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Domain != "" {
			t.Fatalf("cookie over TLS %+v", c)
		}
	})

	_, _, b := exchange(t, base, mintLink(admin, lenaID), nil)
	agent := map[string]any{"name": "by cookie"}
	t.Run("what changes something needs the CSRF token", func(t *testing.T) {
		resp, raw := b.send("POST", "/api/v1/agents", agent, map[string]string{"X-CSRF-Token": ""})
		if resp.StatusCode != 403 || !strings.Contains(problem(t, raw), "X-CSRF-Token") {
			t.Fatalf("no CSRF header: %d %s", resp.StatusCode, raw)
		}
		resp, raw = b.send("POST", "/api/v1/agents", agent, map[string]string{"X-CSRF-Token": b.csrf[:len(b.csrf)-2] + "xx"})
		if resp.StatusCode != 403 {
			t.Fatalf("a wrong CSRF token: %d %s", resp.StatusCode, raw)
		}
		// Another session's token is not this one's.
		_, _, other := exchange(t, base, mintLink(admin, lenaID), nil)
		resp, raw = b.send("POST", "/api/v1/agents", agent, map[string]string{"X-CSRF-Token": other.csrf})
		if resp.StatusCode != 403 {
			t.Fatalf("another session's CSRF token: %d %s", resp.StatusCode, raw)
		}
		if resp, raw := b.send("POST", "/api/v1/agents", agent, nil); resp.StatusCode != 201 {
			t.Fatalf("with the CSRF token: %d %s", resp.StatusCode, raw)
		}
		if resp, raw := b.send("GET", "/api/v1/agents", nil, map[string]string{"X-CSRF-Token": ""}); resp.StatusCode != 200 {
			t.Fatalf("a read needs no CSRF token: %d %s", resp.StatusCode, raw)
		}
	})
	t.Run("another origin is refused, even with the token", func(t *testing.T) {
		resp, raw := b.send("POST", "/api/v1/agents", agent, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
		if resp.StatusCode != 403 || !strings.Contains(problem(t, raw), `"https://evil.example", which is not an allowed origin`) {
			t.Fatalf("foreign origin: %d %s", resp.StatusCode, raw)
		}
		resp, raw = b.send("DELETE", "/api/v1/agents/1", nil, map[string]string{"Origin": "", "Sec-Fetch-Site": "cross-site"})
		if resp.StatusCode != 403 || !strings.Contains(problem(t, raw), "another site") {
			t.Fatalf("cross-site without an Origin: %d %s", resp.StatusCode, raw)
		}
	})
	t.Run("a link is not exchanged from another origin", func(t *testing.T) {
		link := mintLink(admin, lenaID)
		resp, raw, _ := exchange(t, base, link, map[string]string{"Origin": "https://evil.example"})
		if resp.StatusCode != 403 || sessionCookieOf(resp) != nil {
			t.Fatalf("exchange from another origin: %d %s", resp.StatusCode, raw)
		}
		if resp, raw, _ := exchange(t, base, link, nil); resp.StatusCode != 200 {
			t.Fatalf("the refused exchange spent the link: %d %s", resp.StatusCode, raw)
		}
	})
	t.Run("API tokens work as before", func(t *testing.T) {
		// No cookie, no CSRF token, whatever Origin: an API client.
		resp, raw := lena.rawDo("POST", "/api/v1/agents", agent)
		if resp.StatusCode != 201 {
			t.Fatalf("bearer: %d %s", resp.StatusCode, raw)
		}
		req, _ := http.NewRequest("POST", base+"/api/v1/agents", strings.NewReader(`{"name":"x"}`))
		req.Header.Set("Authorization", "Bearer "+lena.token)
		req.Header.Set("Origin", "https://elsewhere.example")
		req.AddCookie(&http.Cookie{Name: "sandchat_session", Value: "scs_stale"})
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 201 {
			t.Fatalf("bearer beside a stale cookie: %v %v", resp, err)
		}
		var me struct{ Name string }
		admin.must(200, "GET", "/api/v1/me", nil, &me)
	})
	t.Run("only admins make links, for users that exist", func(t *testing.T) {
		lena.must(403, "POST", fmt.Sprintf("/api/v1/users/%d/login-link", lenaID), nil, nil)
		if resp, raw := b.send("POST", fmt.Sprintf("/api/v1/users/%d/login-link", lenaID), nil, nil); resp.StatusCode != 403 {
			t.Fatalf("non-admin by cookie: %d %s", resp.StatusCode, raw)
		}
		admin.must(404, "POST", "/api/v1/users/999999/login-link", nil, nil)
	})

	dialCookie := func(b *browserClient, origin string) (*websocket.Conn, *http.Response, error) {
		h := http.Header{"Cookie": {b.cookie.String()}}
		if origin != "" {
			h.Set("Origin", origin)
		}
		return websocket.DefaultDialer.Dial(strings.Replace(base, "http://", "ws://", 1)+"/api/v1/ws", h)
	}
	t.Run("a socket by cookie comes from the server's own page", func(t *testing.T) {
		conn, _, err := dialCookie(b, base)
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		for _, origin := range []string{"https://evil.example", ""} {
			if _, resp, err := dialCookie(b, origin); err == nil || resp == nil || resp.StatusCode != 403 {
				t.Fatalf("socket by cookie from origin %q: %v %v", origin, err, resp)
			}
		}
	})
	t.Run("sign-out ends the session and its sockets", func(t *testing.T) {
		_, _, other := exchange(t, base, mintLink(admin, lenaID), nil) // another browser of lena's
		conn, _, err := dialCookie(b, base)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		otherConn, _, err := dialCookie(other, base)
		if err != nil {
			t.Fatal(err)
		}
		defer otherConn.Close()
		if resp, raw := b.send("POST", "/api/v1/auth/logout", nil, map[string]string{"X-CSRF-Token": ""}); resp.StatusCode != 403 {
			t.Fatalf("sign-out without the CSRF token: %d %s", resp.StatusCode, raw)
		}
		resp, raw := b.send("POST", "/api/v1/auth/logout", nil, nil)
		if resp.StatusCode != 204 {
			t.Fatalf("sign-out: %d %s", resp.StatusCode, raw)
		}
		if c := sessionCookieOf(resp); c == nil || c.Value != "" || c.Expires.After(time.Now()) {
			t.Fatalf("sign-out left the cookie: %+v", c)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, _, err := conn.ReadMessage()
			var ce *websocket.CloseError
			if errors.As(err, &ce) && ce.Code == 4001 {
				break
			}
			if err != nil {
				t.Fatalf("the signed-out session's socket: %v, want close 4001", err)
			}
		}
		if resp, raw := b.send("GET", "/api/v1/me", nil, nil); resp.StatusCode != 401 {
			t.Fatalf("the ended session's cookie still signs in: %d %s", resp.StatusCode, raw)
		}
		if resp, raw := b.send("GET", "/api/v1/auth/session", nil, nil); resp.StatusCode != 200 || !strings.Contains(string(raw), `"user":null`) {
			t.Fatalf("session after sign-out: %d %s", resp.StatusCode, raw)
		}
		if _, resp, err := dialCookie(b, base); err == nil || resp == nil || resp.StatusCode != 401 {
			t.Fatalf("a socket by the ended session: %v %v", err, resp)
		}
		// The other browser stays signed in, its socket open.
		if resp, raw := other.send("GET", "/api/v1/me", nil, nil); resp.StatusCode != 200 {
			t.Fatalf("the other session: %d %s", resp.StatusCode, raw)
		}
		_ = otherConn.WriteJSON(map[string]string{"type": "ping"})
		_ = otherConn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := otherConn.ReadMessage(); err != nil {
			t.Fatalf("the other session's socket: %v", err)
		}
		// A token has no session to end.
		lena.must(400, "POST", "/api/v1/auth/logout", nil, nil)
	})
	t.Run("an expired session signs nobody in", func(t *testing.T) {
		_, _, b := exchange(t, base, mintLink(admin, lenaID), nil)
		if _, err := m.DB.Exec(ctx, `update web_sessions set expires_at = now() - interval '1 second'
			where secret_hash = sha256(convert_to($1, 'UTF8'))`, b.cookie.Value); err != nil {
			t.Fatal(err)
		}
		resp, raw := b.send("GET", "/api/v1/me", nil, nil)
		if resp.StatusCode != 401 || !strings.Contains(problem(t, raw), "session has ended") {
			t.Fatalf("expired session: %d %s", resp.StatusCode, raw)
		}
	})
	t.Run("no cookie: the session endpoint says so without an error", func(t *testing.T) {
		resp, raw := (&browserClient{t: t, base: base}).send("GET", "/api/v1/auth/session", nil, nil)
		if resp.StatusCode != 200 || strings.TrimSpace(string(raw)) != `{"user":null}` {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
	})
}

// TestSignInRateLimit: link exchanges are counted per client address, good or bad, and
// past the limit refused with 429 and Retry-After, before any link is looked at.
func TestSignInRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node(func(c *Config, _ *Main) { c.RateLogins = 3 })
	base := "http://" + m.Addr()
	admin, _ := m.user(t, "admin", true)
	_, lenaID := m.user(t, "lena", false)
	for i := range 3 {
		if resp, raw, _ := exchange(t, base, base+"/login#t=scl_"+strings.Repeat("A", 42)+fmt.Sprint(i), nil); resp.StatusCode != 401 {
			t.Fatalf("attempt %d: %d %s", i+1, resp.StatusCode, raw)
		}
	}
	link := mintLink(admin, lenaID)
	resp, raw, _ := exchange(t, base, link, nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(problem(t, raw), "at most 3 logins per minute") {
		t.Fatalf("fourth attempt: %d %s (Retry-After %q)", resp.StatusCode, raw, resp.Header.Get("Retry-After"))
	}
	// Refused before it was looked at: the link is not spent.
	var used bool
	if err := m.DB.QueryRow(context.Background(), `select used_at is not null from login_links where secret_hash = sha256(convert_to($1, 'UTF8'))`,
		link[strings.Index(link, "scl_"):]).Scan(&used); err != nil || used {
		t.Fatalf("the refused link: used %v, %v", used, err)
	}
}

// TestSignInBehindProxy: behind trusted proxies, sign-ins are counted per client, as the
// proxies name it, and not against the proxy; the first address of X-Forwarded-For is
// the client's own word and counts for nothing; a peer that is not a trusted proxy is
// counted by its own address whatever it forwards. Every answer says where the limit
// stands.
func TestSignInBehindProxy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wrong := "scl_" + strings.Repeat("A", 43)
	attempt := func(base, forwarded string) *http.Response {
		t.Helper()
		resp, raw, _ := exchange(t, base, base+"/login#t="+wrong, map[string]string{"X-Forwarded-For": forwarded})
		if resp.StatusCode != 401 && resp.StatusCode != 429 {
			t.Fatalf("X-Forwarded-For %q: %d %s", forwarded, resp.StatusCode, raw)
		}
		return resp
	}
	t.Run("trusted", func(t *testing.T) {
		m := e.node(func(c *Config, _ *Main) { c.RateLogins = 3; c.TrustedProxies = []string{"127.0.0.0/8", "10.1.0.0/16"} })
		base := "http://" + m.Addr()
		for i := range 3 {
			resp := attempt(base, "203.0.113.1")
			if resp.StatusCode != 401 || resp.Header.Get("RateLimit-Limit") != "3" || resp.Header.Get("RateLimit-Remaining") != fmt.Sprint(2-i) ||
				resp.Header.Get("RateLimit-Policy") != "3;w=60" || resp.Header.Get("RateLimit-Reset") == "" {
				t.Fatalf("attempt %d of the first client: %d, RateLimit %q remaining %q reset %q policy %q", i+1, resp.StatusCode,
					resp.Header.Get("RateLimit-Limit"), resp.Header.Get("RateLimit-Remaining"), resp.Header.Get("RateLimit-Reset"), resp.Header.Get("RateLimit-Policy"))
			}
		}
		// Through a second proxy of the chain, the same client; claiming another
		// address first does not help it.
		for _, fwd := range []string{"203.0.113.1, 10.1.2.3", "198.51.100.9, 203.0.113.1", "198.51.100.9,203.0.113.1:5120, 10.1.2.3"} {
			if resp := attempt(base, fwd); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit-Remaining") != "0" {
				t.Fatalf("the first client again, as %q: %d (Retry-After %q), want 429", fwd, resp.StatusCode, resp.Header.Get("Retry-After"))
			}
		}
		// Another client behind the same proxy is not refused for the first one's attempts.
		for _, fwd := range []string{"203.0.113.2", "[2001:db8::7]:443, 10.1.0.1"} {
			if resp := attempt(base, fwd); resp.StatusCode != 401 {
				t.Fatalf("another client, as %q: %d, want 401 (counted on its own)", fwd, resp.StatusCode)
			}
		}
	})
	t.Run("IPv6 clients count by their /64", func(t *testing.T) {
		// Whoever holds one address of a /64 holds them all: a new address for each
		// attempt is still the same client.
		m := e.node(func(c *Config, _ *Main) { c.RateLogins = 3; c.TrustedProxies = []string{"127.0.0.0/8"} })
		base := "http://" + m.Addr()
		for i, fwd := range []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff:ffff:ffff:fffe", "[2001:db8:1:2::4]:443", "2001:db8:1:2:a::5%eth0", "[2001:db8:1:2::6]"} {
			if want := map[bool]int{true: 429, false: 401}[i >= 3]; attempt(base, fwd).StatusCode != want {
				t.Fatalf("attempt %d, from %s: want %d", i+1, fwd, want)
			}
		}
		for _, fwd := range []string{"2001:db8:1:3::1", "[2001:db8:1:4::1]"} {
			if resp := attempt(base, fwd); resp.StatusCode != 401 {
				t.Fatalf("a client of another /64, as %s: %d, want 401 (counted on its own, not as the proxy)", fwd, resp.StatusCode)
			}
		}
	})
	t.Run("untrusted peer", func(t *testing.T) {
		m := e.node(func(c *Config, _ *Main) { c.RateLogins = 3; c.TrustedProxies = []string{"10.0.0.0/8"} })
		base := "http://" + m.Addr()
		for i := range 4 {
			resp := attempt(base, fmt.Sprintf("203.0.113.%d", i+1))
			if want := map[bool]int{true: 429, false: 401}[i == 3]; resp.StatusCode != want {
				t.Fatalf("attempt %d, forwarded by a peer that is no trusted proxy: %d, want %d", i+1, resp.StatusCode, want)
			}
		}
	})
}
