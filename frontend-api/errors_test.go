package frontendapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/migrations/testenv"
)

// TestErrorHandler: every error a handler returns becomes one problem+json answer whose
// status follows its code; an internal error's detail is logged, never shown.
func TestErrorHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code       string
		detail     string // a part of the detail the client sees
		retryAfter string
		dependency string
	}{
		{"invalid", sandchat.Errorf(sandchat.EINVALID, "Bad title."), 400, sandchat.EINVALID, "Bad title.", "", ""},
		{"unauthorized", sandchat.Errorf(sandchat.EUNAUTHORIZED, "Who?"), 401, sandchat.EUNAUTHORIZED, "Who?", "", ""},
		{"forbidden", sandchat.Errorf(sandchat.EFORBIDDEN, "Viewers read."), 403, sandchat.EFORBIDDEN, "Viewers read.", "", ""},
		{"not found", sandchat.Errorf(sandchat.ENOTFOUND, "No such agent."), 404, sandchat.ENOTFOUND, "No such agent.", "", ""},
		{"conflict", sandchat.Errorf(sandchat.ECONFLICT, "Stale version."), 409, sandchat.ECONFLICT, "Stale version.", "", ""},
		{"too large", sandchat.Errorf(sandchat.ETOOLARGE, "Too big."), 413, sandchat.ETOOLARGE, "Too big.", "", ""},
		{"busy, with when to retry", &sandchat.Error{Code: sandchat.EBUSY, Message: "Slow down.", RetryAfter: 3}, 429, sandchat.EBUSY, "Slow down.", "3", ""},
		{"dependency down", sandchat.Unavailable(sandchat.DepRedis, errors.New("dial tcp: connection refused")), 503, sandchat.EUNAVAILABLE, "Redis", "2", sandchat.DepRedis},
		{"internal: the detail stays in the log", errors.New("pq: secret table exploded"), 500, sandchat.EINTERNAL, "", "", ""},
		{"an untranslated deadline is a 503", fmt.Errorf("query: %w", context.DeadlineExceeded), 503, sandchat.EUNAVAILABLE, "unavailable", "2", ""},
		{"a Redis Cluster between master and replica is a 503", fmt.Errorf("save: %w", errors.New("CLUSTERDOWN The cluster is down")), 503, sandchat.EUNAVAILABLE, "Redis", "2", sandchat.DepRedis},
		{"every 503 says when to retry", sandchat.Errorf(sandchat.EUNAVAILABLE, "The sandbox engine is starting."), 503, sandchat.EUNAVAILABLE, "starting", "2", ""},
		{"every 429 says when to retry", sandchat.Errorf(sandchat.EBUSY, "Queue full."), 429, sandchat.EBUSY, "Queue full.", "2", ""},
		{"Fiber's own errors keep their status", fiber.ErrMethodNotAllowed, 405, sandchat.EINVALID, "Method Not Allowed", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs testenv.Buffer
			s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
			s.app = fiber.New(fiber.Config{ErrorHandler: s.errorHandler})
			s.app.Get("/", func(*fiber.Ctx) error { return tc.err })
			resp, err := s.app.Test(httptest.NewRequest("GET", "/", nil))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			var p Problem
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("body %s: %v", raw, err)
			}
			if resp.StatusCode != tc.status || p.Status != tc.status || p.Code != tc.code || p.Dependency != tc.dependency {
				t.Fatalf("%d %+v, want %d with code %s, dependency %q", resp.StatusCode, p, tc.status, tc.code, tc.dependency)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				t.Fatalf("content type %q", ct)
			}
			if !strings.Contains(p.Detail, tc.detail) || p.Detail == "" || p.Type != "urn:sandchat:problem:"+tc.code {
				t.Fatalf("problem %+v, want a detail containing %q", p, tc.detail)
			}
			if got := resp.Header.Get("Retry-After"); got != tc.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			logged := strings.Contains(logs.String(), "secret table exploded")
			if tc.code == sandchat.EINTERNAL && (!logged || strings.Contains(string(raw), "secret")) {
				t.Fatalf("internal error: logged %v, answered %s", logged, raw)
			}
			if tc.code != sandchat.EINTERNAL && logs.String() != "" {
				t.Fatalf("a %s error was logged: %s", tc.code, logs.String())
			}
		})
	}
}

// TestStatusCodeCoversEveryCode: Fiber's statuses map back onto the application codes.
func TestStatusCodeCoversEveryCode(t *testing.T) {
	t.Parallel()
	for code, status := range codeStatus {
		if got := statusCode(status); got != code {
			t.Errorf("statusCode(%d) = %s, want %s", status, got, code)
		}
	}
	if got := statusCode(502); got != sandchat.EINTERNAL {
		t.Errorf("statusCode(502) = %s, want internal", got)
	}
}
