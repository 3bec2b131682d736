package frontendapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandchat/sandchat"
)

// HeaderRequestID names a request: taken from the client when it is sane, else made,
// and always returned, so a client's report and the server's logs meet.
const HeaderRequestID = "X-Request-Id"

// maxRequestID bounds a request id taken from a client.
const maxRequestID = 128

// requestID is the client's id when it is sane (bounded, of characters that need no
// quoting in a log or a header), else a new one.
func requestID(given string) string {
	if given != "" && len(given) <= maxRequestID && strings.Trim(given, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:") == "" {
		return given
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// secretParams are query parameters that carry a credential: logged as REDACTED. A
// ticket is one too: spent once used, but not one its request never reached (a route
// that did not match, Redis away when it was to be spent), which still works for
// seconds.
var secretParams = []string{"access_token", "ticket"}

// redactURL is a request URI fit for a log: its credentials replaced.
func redactURL(uri string) string {
	path, query, ok := strings.Cut(uri, "?")
	if !ok {
		return uri
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return path + "?(unparsed query)"
	}
	redacted := false
	for _, p := range secretParams {
		if _, ok := q[p]; ok {
			q[p], redacted = []string{"REDACTED"}, true
		}
	}
	if !redacted {
		return uri
	}
	return path + "?" + q.Encode()
}

// probes are asked by load balancers and Prometheus every few seconds: their lines go
// to debug, so the access log shows what people and programs did.
var probes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// observe is the first middleware: it names the request (X-Request-Id, in the context
// of everything the request does), answers its error through the error handler, so
// that what it measures is what the client got, and then counts it and writes its line
// of the access log (method, route, status, duration, user; never a credential).
func (s *Server) observe(c *fiber.Ctx) error {
	start := time.Now()
	id := requestID(c.Get(HeaderRequestID))
	c.Set(HeaderRequestID, id)
	// s.base ends the requests still running when the shutdown's drain is over.
	ctx, span := s.startSpan(c, sandchat.WithRequestID(s.base, id))
	c.SetUserContext(ctx)
	err := c.Next()
	if err != nil {
		if err = s.errorHandler(c, err); err != nil {
			return err
		}
	}
	status, took := c.Response().StatusCode(), time.Since(start)
	method, route := labels(c)
	s.metrics.count(method, route, status, took)
	endSpan(span, method, route, status)
	level := slog.LevelInfo
	if probes[route] {
		level = slog.LevelDebug
	}
	if !s.log.Enabled(ctx, level) {
		return nil
	}
	attrs := []any{"method", method, "route", route, "url", redactURL(string(c.Request().RequestURI())),
		"status", status, "ms", took.Milliseconds()}
	if u := sandchat.UserFromContext(c.UserContext()); u != nil {
		attrs = append(attrs, "user_id", u.ID)
	}
	s.log.Log(context.WithoutCancel(ctx), level, "request", attrs...)
	return nil
}

// headerCarrier reads a request's trace context (traceparent, tracestate) from its headers.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c headerCarrier) Keys() []string {
	var keys []string
	c.h.VisitAll(func(k, _ []byte) { keys = append(keys, string(k)) })
	return keys
}

// startSpan begins the request's span, a child of the caller's trace when its headers
// carry one (W3C trace context).
func (s *Server) startSpan(c *fiber.Ctx, ctx context.Context) (context.Context, trace.Span) {
	ctx = propagation.TraceContext{}.Extract(ctx, headerCarrier{&c.Request().Header})
	return s.tracer.Start(ctx, "HTTP "+c.Method(), trace.WithSpanKind(trace.SpanKindServer))
}

// endSpan names the span after the route it matched and ends it with the answer.
func endSpan(span trace.Span, method, route string, status int) {
	span.SetName(method + " " + route)
	span.SetAttributes(attribute.String("http.request.method", method), attribute.String("http.route", route),
		attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(status))
	}
	span.End()
}
