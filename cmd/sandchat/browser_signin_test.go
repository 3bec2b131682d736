package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandchat/sandchat/migrations/testenv"
)

// serveAsMakeRun starts `sandchat serve` as `make run` does (an admin token file) on a
// free port, and returns what it printed once it printed how to sign in.
func serveAsMakeRun(t *testing.T, e *testEnv) string {
	ctx, cancel := context.WithCancel(context.Background())
	var out testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--database-url", e.databaseURL, "--redis-url", testenv.RedisURL(),
			"--redis-prefix", e.redisPrefix, "--sandbox=false", "--log-level", "warn", "--shutdown-timeout", "5s",
			"--admin-token-file", filepath.Join(t.TempDir(), "admin-token")}, &out, tlog{t})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	})
	eventually(t, 30*time.Second, "serve prints how to sign in", func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve stopped: %v\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), "API token of ")
	})
	return out.String()
}

// TestBrowserSignIn: the link `make run` prints signs a browser in at once, without a
// token to paste; the session outlives a reload and is kept where the page's script
// cannot read it; Sign out ends it, on the server too; a spent link says so; a link
// pasted in the sign-in form works as well. At phone width, by keyboard.
func TestBrowserSignIn(t *testing.T) {
	e := newEnv(t)
	printed := serveAsMakeRun(t, e)
	m := regexp.MustCompile(`sandchat listening on (http://\S+)\n[\s\S]*Sign in: open (http://\S+/login#t=scl_\S+)\n[\s\S]*API token of admin: (sct_\S+)\n`).FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("serve printed %q: want where it listens, a login link and the API token", printed)
	}
	base, link, token := m[1], m[2], m[3]
	admin := &client{t: t, base: base, token: token}
	dir := screenshotDir(t)
	tb := openTab(t, browser(t), "admin", dir)

	tb.run(t, "open the printed link: signed in, the secret gone from the address",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateTouch),
		chromedp.Navigate(link),
		chromedp.WaitVisible("#chat-view", chromedp.ByID),
		until(`location.href === `+jsString(base+"/")),
		until(`!document.querySelector("#logout").hidden`),
		// The session is an HttpOnly cookie: nothing of it in the page's reach.
		until(`document.cookie === "" && localStorage.getItem("sandchat.token") === null`),
	)
	tb.shot(t, "01-signed-in-390")

	tb.run(t, "start a chat and send a message",
		chromedp.Click("#menu", chromedp.ByID),
		until(`document.querySelector("#sidebar").getBoundingClientRect().left >= 0`),
		chromedp.Click("#new-conv button", chromedp.ByQuery),
		// On a touch screen Enter is a new line: Send sends.
		chromedp.WaitEnabled("#input", chromedp.ByID),
		chromedp.SetValue("#input", "Hello there", chromedp.ByID),
		chromedp.Click("#send", chromedp.ByID),
		until(`[...document.querySelectorAll("#messages .msg.user")].some((m) => m.textContent.includes("Hello there"))`),
		until(`[...document.querySelectorAll("#messages .msg.assistant")].some((m) => m.textContent.includes("built-in offline assistant"))`),
	)
	tb.run(t, "a reload stays signed in, in the same conversation",
		chromedp.Reload(),
		chromedp.WaitVisible("#chat-view", chromedp.ByID),
		until(`location.hash.startsWith("#/c/")`),
		until(`[...document.querySelectorAll("#messages .msg.user")].some((m) => m.textContent.includes("Hello there"))`),
	)
	tb.shot(t, "02-after-reload-390")

	var cookies []*network.Cookie
	tb.run(t, "read the session cookie as the browser keeps it",
		chromedp.ActionFunc(func(ctx context.Context) (err error) {
			cookies, err = network.GetCookies().WithURLs([]string{base}).Do(ctx)
			return err
		}))
	var session *network.Cookie
	for _, c := range cookies {
		if c.Name == "sandchat_session" {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteLax {
		t.Fatalf("the browser's cookies %+v: want sandchat_session, HttpOnly, SameSite=Lax", cookies)
	}

	tb.run(t, "sign out by keyboard",
		chromedp.Focus("#logout", chromedp.ByID),
		chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible("#login-view", chromedp.ByID),
		until(`document.activeElement.id === "token"`),
		until(`document.querySelector("#login-error").textContent === ""`),
	)
	tb.shot(t, "03-signed-out-390")
	// The ended session signs nobody in, whoever holds its cookie.
	req, _ := http.NewRequest("GET", base+"/api/v1/me", nil)
	req.AddCookie(&http.Cookie{Name: session.Name, Value: session.Value})
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("the signed-out cookie: %v %v", resp, err)
	}
	tb.run(t, "a reload stays signed out",
		chromedp.Reload(),
		chromedp.WaitVisible("#login-view", chromedp.ByID),
		until(`document.querySelector("#chat-view").hidden`),
	)

	tb.allow("/api/v1/auth/login") // the spent link's 401
	tb.run(t, "the spent link says so, on the sign-in page",
		chromedp.Navigate(link),
		chromedp.WaitVisible("#login-view", chromedp.ByID),
		until(`document.querySelector("#login-error").textContent.startsWith("This sign-in link does not work")`),
		until(`location.href === `+jsString(base+"/")),
		until(`document.querySelector("#login").getBoundingClientRect().right <= 390`),
	)
	tb.shot(t, "04-spent-link-390")

	// An admin makes a link for someone who opens it on another device: pasted in the
	// form, it signs in as opening it would.
	var made struct{ URL string }
	var me struct{ ID int64 }
	admin.must(200, "GET", "/api/v1/me", nil, &me)
	admin.must(201, "POST", fmt.Sprintf("/api/v1/users/%d/login-link", me.ID), nil, &made)
	tb.run(t, "a pasted link signs in, by keyboard",
		chromedp.EmulateViewport(1280, 850),
		chromedp.Focus("#token", chromedp.ByID),
		chromedp.SendKeys("#token", made.URL+kb.Enter, chromedp.ByID),
		chromedp.WaitVisible("#chat-view", chromedp.ByID),
		until(`document.querySelector("#me").textContent === "admin"`),
		until(`document.querySelector("#token").value === ""`),
	)
	tb.shot(t, "05-pasted-link-1280")
}

// TestBrowserSocketCarriesNoToken: a page signed in with a pasted API token opens its
// socket with a ticket, never with the token in the address (where proxies and logs keep
// it), a new one for each socket (a reload, a reconnect after the server went away); a
// page signed in by its session cookie puts nothing in the address at all.
func TestBrowserSocketCarriesNoToken(t *testing.T) {
	e := newEnv(t)
	m := e.node()
	admin, _ := m.user(t, "admin", true)
	alice, aliceID := m.user(t, "alice", false)
	base := "http://" + m.Addr()
	root := browser(t)
	dir := screenshotDir(t)
	var urls []string
	socketURLs := chromedp.Evaluate(`window.socketURLs`, &urls)
	pasted := openTab(t, root, "pasted token", dir)
	pasted.run(t, "sign in with the token",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		chromedp.WaitVisible("#chat-view", chromedp.ByID),
		until(socketOpen), socketURLs)
	all := slices.Clone(urls)
	pasted.run(t, "a reload", chromedp.Reload(), chromedp.WaitVisible("#chat-view", chromedp.ByID), until(socketOpen), socketURLs)
	all = append(all, urls...)
	// The server closes every socket with 1012 when it shuts down; here the page's socket
	// is closed under it as the server would, and the page reconnects by itself.
	pasted.run(t, "a reconnect",
		chromedp.Evaluate(`window.socketURLs = []; true`, nil),
		chromedp.ActionFunc(func(context.Context) error { m.Hub.CloseAll(); return nil }),
		until(`window.socketURLs.length > 0 && window.socketOpen()`), socketURLs)
	all = append(all, urls...)
	if len(all) < 3 {
		t.Fatalf("sockets opened: %q, want one at sign-in, one after the reload and one to reconnect", all)
	}
	seen := map[string]bool{}
	for _, u := range all {
		if strings.Contains(u, alice.token) || strings.Contains(u, "access_token") || !regexp.MustCompile(`/api/v1/ws\?ticket=sctk_[\w-]{43}$`).MatchString(u) {
			t.Fatalf("a socket opened at %q: want /api/v1/ws?ticket=sctk_…, never the token", u)
		}
		if seen[u] {
			t.Fatalf("a ticket opened two sockets: %q", all)
		}
		seen[u] = true
	}

	cookie := openTab(t, root, "session cookie", dir)
	cookie.run(t, "sign in by link", chromedp.Navigate(mintLink(admin, aliceID)), chromedp.WaitVisible("#chat-view", chromedp.ByID), until(socketOpen), socketURLs)
	for _, u := range urls {
		if u != strings.Replace(base, "http://", "ws://", 1)+"/api/v1/ws" {
			t.Fatalf("a session's socket opened at %q: want the bare address, its cookie goes by itself", u)
		}
	}
}
