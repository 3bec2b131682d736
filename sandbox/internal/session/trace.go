package session

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandchat/sandchat"
)

// span starts a span of a session's step, in ctx's trace.
func (env *Env) span(ctx context.Context, name, key string) (context.Context, trace.Span) {
	t := env.Tracer
	if t == nil {
		t = noop.Tracer{}
	}
	return t.Start(ctx, name, trace.WithAttributes(attribute.String("sandchat.session", key)))
}

// endSpan ends a step's span, with err when it failed, and what came of it (name,
// value pairs).
func endSpan(span trace.Span, err error, outcome ...string) {
	for i := 0; i+1 < len(outcome); i += 2 {
		span.SetAttributes(attribute.String(outcome[i], outcome[i+1]))
	}
	if err != nil {
		span.SetStatus(codes.Error, sandchat.ErrorMessage(err))
	}
	span.End()
}
