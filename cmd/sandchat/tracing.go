package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracingEnabled says whether the standard OpenTelemetry variables ask for traces:
// an OTLP endpoint is set and the SDK is not switched off.
func tracingEnabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// newTracing is the process's tracer provider: off (a no-op) by default; with
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set, spans go in
// batches to that OTLP/HTTP collector, configured by the SDK's own variables
// (OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, …). shutdown flushes what is pending.
func newTracing(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if !tracingEnabled() {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OpenTelemetry exporter (OTEL_EXPORTER_OTLP_*): %w", err)
	}
	res, err := tracingResource(ctx)
	if err != nil {
		return nil, nil, err
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return sdk, sdk.Shutdown, nil
}

// tracingResource names this process: service.name sandchat unless OTEL_SERVICE_NAME
// or OTEL_RESOURCE_ATTRIBUTES say otherwise, and its version.
func tracingResource(ctx context.Context) (*resource.Resource, error) {
	own := resource.NewSchemaless(attribute.String("service.name", "sandchat"), attribute.String("service.version", buildVersion()))
	env, err := resource.New(ctx, resource.WithFromEnv(), resource.WithHost(), resource.WithProcessPID())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OpenTelemetry resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	return resource.Merge(own, env)
}

// pgTracer gives each Postgres statement a span, a child of the caller's.
type pgTracer struct{ tracer trace.Tracer }

func (p pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	ctx, _ = p.tracer.Start(ctx, "postgres "+sqlVerb(data.SQL), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", data.SQL)))
	return ctx
}

func (p pgTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span := trace.SpanFromContext(ctx)
	if data.Err != nil && !errors.Is(data.Err, pgx.ErrNoRows) {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, "query failed")
	}
	span.End()
}

// sqlVerb is a statement's first word (select, insert, …), a span name of bounded variety.
func sqlVerb(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "query"
	}
	return strings.ToLower(f[0])
}
