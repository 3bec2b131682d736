package frontendapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/sandchat/sandchat"
)

var codeStatus = map[string]int{
	sandchat.EINVALID:      http.StatusBadRequest,
	sandchat.EUNAUTHORIZED: http.StatusUnauthorized,
	sandchat.EFORBIDDEN:    http.StatusForbidden,
	sandchat.ENOTFOUND:     http.StatusNotFound,
	sandchat.ECONFLICT:     http.StatusConflict,
	sandchat.ETOOLARGE:     http.StatusRequestEntityTooLarge,
	sandchat.EBUSY:         http.StatusTooManyRequests,
	sandchat.EUNAVAILABLE:  http.StatusServiceUnavailable,
	sandchat.EINTERNAL:     http.StatusInternalServerError,
}

// statusCode is the reverse of codeStatus, for errors Fiber raises itself.
func statusCode(status int) string {
	for code, s := range codeStatus {
		if s == status {
			return code
		}
	}
	if status >= 500 {
		return sandchat.EINTERNAL
	}
	return sandchat.EINVALID
}

// defaultRetryAfter is the Retry-After, in seconds, of a 503 or 429 whose error named none.
const defaultRetryAfter = 2

// Problem is an RFC 9457 problem document with the application error code.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	// Dependency names what is down on a 503 (postgres, redis).
	Dependency string `json:"dependency,omitempty"`
}

// errorHandler is the one place errors become responses. Application errors show their
// message; anything else is logged here, once, and the client sees a generic message.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	err = lastResort(c, err)
	code, msg := sandchat.ErrorCode(err), sandchat.ErrorMessage(err)
	var fe *fiber.Error
	if errors.As(err, &fe) {
		code, msg = statusCode(fe.Code), fe.Message
		if fe.Code == fiber.StatusRequestEntityTooLarge {
			// fasthttp refuses the body before any handler reads it: say how big it was
			// and what is allowed, as every other size refusal does.
			code, msg = sandchat.ETOOLARGE, fmt.Sprintf("The request body is %s; requests are limited to %s.",
				sandchat.Size(int64(c.Request().Header.ContentLength())), sandchat.Size(int64(s.app.Config().BodyLimit)))
		}
	}
	status := codeStatus[code]
	if fe != nil {
		status = fe.Code // 405 and friends have no application code of their own
	}
	if code == sandchat.EINTERNAL {
		s.log.ErrorContext(c.UserContext(), "request failed", "method", utils.CopyString(c.Method()), "path", utils.CopyString(c.Path()), "err", err)
	}
	var ae *sandchat.Error
	switch {
	case errors.As(err, &ae) && ae.RetryAfter > 0:
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(ae.RetryAfter))
	case status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests:
		// Every refusal to retry says when: a part that did not name a delay gets the
		// short one a restarting dependency or engine usually needs.
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(defaultRetryAfter))
	}
	dep := ""
	if ae != nil {
		dep = ae.Dependency
	}
	c.Set(fiber.HeaderContentType, "application/problem+json")
	return c.Status(status).JSON(Problem{
		Type: "urn:sandchat:problem:" + code, Title: http.StatusText(status), Status: status, Detail: msg, Code: code,
		Dependency: dep,
	}, "application/problem+json")
}

// lastResort keeps a known failure from becoming a 500 when an adapter let a driver
// error through untranslated: a connection failure or a deadline is a 503 to retry, and
// so is whatever a request stopped by the shutdown ended with.
func lastResort(c *fiber.Ctx, err error) error {
	if sandchat.ErrorCode(err) != sandchat.EINTERNAL {
		return err
	}
	if errors.Is(context.Cause(c.UserContext()), errShutdown) {
		return errors.Join(shutdownProblem, err)
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return err
	}
	if sandchat.IsConnError(err) || errors.Is(err, context.DeadlineExceeded) {
		return errors.Join(sandchat.Unavailable("", err), err)
	}
	if sandchat.RedisNotNow(err) {
		return errors.Join(sandchat.Unavailable(sandchat.DepRedis, err), err)
	}
	return err
}
