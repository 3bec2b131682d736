// Package openai is an agents.Provider for any OpenAI-compatible Chat Completions
// endpoint. It streams every step, assembles tool calls from the streamed chunks and
// does its own retrying, so that the retry policy is the project's and not the SDK's.
package openai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents"
)

// Defaults applied by New to zero-valued Config fields. DefaultMaxRetries is not one of
// them (zero retries is a valid choice); it is the value main should default its flag to.
const (
	DefaultBaseURL        = "https://api.openai.com/v1"
	DefaultMaxRetries     = 2
	DefaultRetryBaseDelay = 500 * time.Millisecond
	DefaultRetryMaxDelay  = 30 * time.Second
	DefaultTimeout        = 2 * time.Minute
)

// Config is what the provider needs to reach one endpoint.
type Config struct {
	// BaseURL is the API root, e.g. https://api.openai.com/v1 or http://localhost:11434/v1.
	// Empty means DefaultBaseURL.
	BaseURL string
	// APIKey is sent as a bearer token. Endpoints that ignore it still need a non-empty
	// value, so that a forgotten key fails at start rather than at the first turn.
	APIKey string
	// Model is used when a CompletionRequest does not name one.
	Model string
	// MaxRetries is how many times a step is retried after a 429, a 5xx, a network
	// error or a stalled stream. Zero means a single attempt.
	MaxRetries int
	// RetryBaseDelay is the backoff before the first retry; it doubles on each retry,
	// capped at RetryMaxDelay, with jitter. A Retry-After longer than RetryMaxDelay is
	// not waited for: the step fails at once.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// Timeout bounds the wait for the response headers and for each next streamed
	// chunk. It is an idle timeout, not a limit on the whole answer, so a long answer
	// that keeps streaming is never cut.
	Timeout time.Duration
	// HTTPClient, when set, is used for every request; its Timeout must be zero or
	// long enough for a whole streamed answer.
	HTTPClient *http.Client
	// Tracer, when set, makes a span of each request (each retry too).
	Tracer trace.Tracer
}

// Provider implements agents.Provider over the Chat Completions API. It is safe for
// concurrent use; one Provider serves every turn that uses its endpoint and key.
type Provider struct {
	cfg  Config
	log  *slog.Logger
	chat oai.ChatCompletionService
	// metrics count each attempt (metrics.go).
	metrics *metrics

	// sleep waits between attempts; tests replace it to observe the backoff without waiting.
	sleep func(ctx context.Context, d time.Duration) error
}

var _ agents.Provider = (*Provider)(nil)

// New validates cfg, fills its defaults and returns a provider.
func New(cfg Config, log *slog.Logger) (*Provider, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, sandchat.Errorf(sandchat.EINVALID, "openai: base URL %q must be an absolute http(s) URL", cfg.BaseURL)
	}
	switch {
	case cfg.APIKey == "":
		return nil, sandchat.Errorf(sandchat.EINVALID, "openai: an API key is required")
	case cfg.Model == "":
		return nil, sandchat.Errorf(sandchat.EINVALID, "openai: a default model is required")
	case cfg.MaxRetries < 0:
		return nil, sandchat.Errorf(sandchat.EINVALID, "openai: max retries must not be negative")
	case cfg.RetryBaseDelay < 0 || cfg.RetryMaxDelay < 0 || cfg.Timeout < 0:
		return nil, sandchat.Errorf(sandchat.EINVALID, "openai: delays and timeouts must not be negative")
	}
	if cfg.RetryBaseDelay == 0 {
		cfg.RetryBaseDelay = DefaultRetryBaseDelay
	}
	if cfg.RetryMaxDelay == 0 {
		cfg.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if cfg.RetryMaxDelay < cfg.RetryBaseDelay {
		return nil, sandchat.Errorf(sandchat.EINVALID, "openai: retry max delay must not be below the base delay")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.Tracer{}
	}
	if cfg.HTTPClient == nil {
		// No client-wide Timeout: it would cut long streams; Config.Timeout guards stalls.
		cfg.HTTPClient = &http.Client{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	// The service is built directly rather than through oai.NewClient, which would pick
	// up OPENAI_* variables from the environment behind the config's back. The SDK's
	// own retries are off: Complete retries, and must not retry a stream it has
	// already relayed to onDelta.
	chat := oai.NewChatCompletionService(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	)
	return &Provider{cfg: cfg, log: log, chat: chat, metrics: newMetrics(), sleep: sleepContext}, nil
}

// Complete runs one step of a turn. On failure the returned Completion holds whatever
// text had already been streamed. A cancelled ctx yields ctx's error (errors.Is
// context.Canceled); every other failure carries a sandchat code:
//
//   - EUNAVAILABLE: the endpoint is down, overloaded past the retries, rejects the API
//     key (401/403), does not know the model (404) or its quota is spent.
//   - EINVALID: the conversation no longer fits the model's context window, which the
//     user can act on.
//   - EINTERNAL (a plain error): any other 4xx, i.e. a request this package built
//     wrongly; its detail is for the logs only.
func (p *Provider) Complete(ctx context.Context, req agents.CompletionRequest, onDelta func(string)) (agents.Completion, error) {
	params, err := buildParams(req, p.cfg.Model)
	if err != nil {
		return agents.Completion{}, err
	}
	if onDelta == nil {
		onDelta = func(string) {}
	}

	for attempt := 0; ; attempt++ {
		comp, relayed, err := p.attempt(ctx, params, onDelta)
		if err == nil {
			return comp, nil
		}
		if ctx.Err() != nil {
			return comp, ctx.Err()
		}
		f := classify(err, params.Model)
		switch {
		case !f.retryable:
			return comp, f.err
		case relayed:
			// Retrying would replay text the caller has already shown.
			return comp, fmt.Errorf("%w: %w", sandchat.Errorf(sandchat.EUNAVAILABLE,
				"The model's answer was interrupted (%s).", f.reason), err)
		case attempt >= p.cfg.MaxRetries:
			return comp, fmt.Errorf("%w: %w", sandchat.Errorf(sandchat.EUNAVAILABLE,
				"The model endpoint is unavailable (%s after %d attempts).", f.reason, attempt+1), err)
		}

		delay, ok := p.retryDelay(attempt, f)
		if !ok {
			return comp, fmt.Errorf("%w: %w", sandchat.Errorf(sandchat.EUNAVAILABLE,
				"The model endpoint is unavailable (%s; it asks to wait %s).", f.reason, f.retryAfter.Round(time.Second)), err)
		}
		p.log.WarnContext(ctx, "openai: retrying chat completion",
			"model", params.Model, "attempt", attempt+1, "reason", f.reason, "delay", delay, "err", err)
		if err := p.sleep(ctx, delay); err != nil {
			return comp, err
		}
	}
}

// attempt is one request to the endpoint, counted and in a span of its own.
func (p *Provider) attempt(ctx context.Context, params oai.ChatCompletionNewParams, onDelta func(string)) (agents.Completion, bool, error) {
	t0 := time.Now()
	sctx, span := p.cfg.Tracer.Start(ctx, "chat "+params.Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.request.model", params.Model)))
	defer span.End()
	comp, relayed, err := p.stream(sctx, params, onDelta)
	p.metrics.observe(ctx, params.Model, comp.Usage, time.Since(t0), err)
	if comp.Usage != nil {
		span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", comp.Usage.PromptTokens),
			attribute.Int64("gen_ai.usage.output_tokens", comp.Usage.CompletionTokens))
	}
	if err != nil {
		span.SetStatus(codes.Error, attemptStatus(ctx, err))
	}
	return comp, relayed, err
}

// retryDelay honours the server's Retry-After when it gave one and otherwise backs off
// exponentially with equal jitter, so that concurrent turns do not retry in lockstep.
func (p *Provider) retryDelay(attempt int, f failure) (time.Duration, bool) {
	if f.hasRetryAfter {
		return f.retryAfter, f.retryAfter <= p.cfg.RetryMaxDelay
	}
	d := p.cfg.RetryBaseDelay << min(attempt, 30)
	if d <= 0 || d > p.cfg.RetryMaxDelay {
		d = p.cfg.RetryMaxDelay
	}
	return d/2 + rand.N(d/2+1), true
}

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// failure is what Complete needs to know about a failed attempt.
type failure struct {
	retryable     bool
	reason        string // safe to show: a status or a kind of failure, never a body
	retryAfter    time.Duration
	hasRetryAfter bool
	err           error // returned as is when not retryable
}

func classify(err error, model string) failure {
	var apiErr *oai.Error
	if errors.As(err, &apiErr) {
		return classifyStatus(apiErr, model)
	}
	if errors.Is(err, errStalled) {
		return failure{retryable: true, reason: "no data within the timeout"}
	}
	var streamErr *streamError
	if errors.As(err, &streamErr) {
		// An error event inside a 200 stream is how OpenAI reports a failure that
		// happened after the headers were sent; it is the server's, so retry it.
		return failure{retryable: true, reason: "error event in the stream"}
	}
	if errors.Is(err, errEmptyStream) {
		return failure{retryable: true, reason: "empty stream"}
	}
	// Anything else is the network: refused, reset, a TLS failure, a cut stream.
	return failure{retryable: true, reason: "network error"}
}

func classifyStatus(apiErr *oai.Error, model string) failure {
	status := apiErr.StatusCode
	reason := fmt.Sprintf("HTTP %d", status)
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// The body is not echoed: OpenAI's 401 message quotes part of the key.
		return failure{reason: reason, err: fmt.Errorf("%w: %w", sandchat.Errorf(sandchat.EUNAVAILABLE,
			"The model endpoint rejected the API key (HTTP %d); check the provider's configuration.", status), apiErr)}
	case status == http.StatusTooManyRequests && apiErr.Code == "insufficient_quota":
		// Waiting does not refill a quota.
		return failure{reason: reason, err: fmt.Errorf("%w: %w", sandchat.Errorf(sandchat.EUNAVAILABLE,
			"The model endpoint's quota is exhausted (HTTP 429)."), apiErr)}
	case status == http.StatusTooManyRequests || status >= 500:
		f := failure{retryable: true, reason: reason}
		if apiErr.Response != nil {
			f.retryAfter, f.hasRetryAfter = parseRetryAfter(apiErr.Response.Header, time.Now())
		}
		return f
	case status == http.StatusNotFound:
		return failure{reason: reason, err: fmt.Errorf("%w: %w", sandchat.Errorf(sandchat.EUNAVAILABLE,
			"The model endpoint does not serve model %q, or its base URL is wrong (HTTP 404).", model), apiErr)}
	case apiErr.Code == "context_length_exceeded":
		return failure{reason: reason, err: fmt.Errorf("%w: %w", sandchat.Errorf(sandchat.EINVALID,
			"The conversation is too long for model %q; start a new conversation or shorten it.", model), apiErr)}
	default:
		// The SDK's error text is a status line only; the body's message, which says
		// what was wrong with the request, is kept for the log.
		return failure{reason: reason, err: fmt.Errorf("openai: chat completion request rejected: %w (type=%q code=%q param=%q message=%q)",
			apiErr, apiErr.Type, apiErr.Code, apiErr.Param, apiErr.Message)}
	}
}

// parseRetryAfter reads OpenAI's Retry-After-Ms, then the standard Retry-After in
// seconds or as an HTTP date.
func parseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := parseDelay(h.Get("Retry-After-Ms"), time.Millisecond); ok {
		return d, true
	}
	v := h.Get("Retry-After")
	if d, ok := parseDelay(v, time.Second); ok {
		return d, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func parseDelay(v string, unit time.Duration) (time.Duration, bool) {
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(n) || n < 0 {
		return 0, false
	}
	// Clamped so that an absurd value cannot overflow into a short or negative wait.
	const longest = 24 * time.Hour
	if n >= float64(longest/unit) {
		return longest, true
	}
	return time.Duration(n * float64(unit)), true
}
