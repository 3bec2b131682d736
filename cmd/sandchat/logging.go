package main

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandchat/sandchat"
)

// contextHandler adds to each record what its context says of where it comes from:
// the request's id, so that every line a request leads to (its handler's, the turn it
// started, the run it made) can be found by the X-Request-Id its client got; and, when
// traces are on, the trace and span it was written in.
type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := sandchat.RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(attrs)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}
