package openai

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandchat/sandchat/agents"
)

// maxModelLabels bounds the models the metrics name: an agent's model is whatever its
// owner typed, so past this many distinct names the rest are counted as "other".
const maxModelLabels = 32

// metrics count every attempt the provider makes (retries too), by model.
type metrics struct {
	requests *prometheus.CounterVec   // model, status
	tokens   *prometheus.CounterVec   // model, kind
	duration *prometheus.HistogramVec // model

	mu     sync.Mutex
	models map[string]bool // the model names labels use; guarded by mu
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandchat_llm_requests_total",
			Help: "Chat Completions requests (each retry too), by model and status: ok, http_<code>, timeout (no data within the idle timeout), stream_error, empty, network, cancelled.",
		}, []string{"model", "status"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandchat_llm_tokens_total", Help: "LLM tokens the endpoint reported, by model and kind: prompt, completion.",
		}, []string{"model", "kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandchat_llm_request_duration_seconds", Help: "Chat Completions requests from sending to the end of the streamed answer, by model.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300},
		}, []string{"model"}),
		models: map[string]bool{},
	}
}

// Collectors are the provider's metrics; main registers them.
func (p *Provider) Collectors() []prometheus.Collector {
	return []prometheus.Collector{p.metrics.requests, p.metrics.tokens, p.metrics.duration}
}

// model is the label of a model name: itself, or "other" past maxModelLabels names.
func (m *metrics) model(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.models[name] {
		return name
	}
	if len(m.models) >= maxModelLabels {
		return "other"
	}
	m.models[name] = true
	return name
}

// observe counts one attempt that took took and ended with err, and the tokens it used.
func (m *metrics) observe(ctx context.Context, model string, usage *agents.Usage, took time.Duration, err error) {
	model = m.model(model)
	m.requests.WithLabelValues(model, attemptStatus(ctx, err)).Inc()
	m.duration.WithLabelValues(model).Observe(took.Seconds())
	if usage != nil {
		m.tokens.WithLabelValues(model, "prompt").Add(float64(usage.PromptTokens))
		m.tokens.WithLabelValues(model, "completion").Add(float64(usage.CompletionTokens))
	}
}

// attemptStatus is the status label of an attempt: a bounded set.
func attemptStatus(ctx context.Context, err error) string {
	var apiErr *oai.Error
	var streamErr *streamError
	switch {
	case err == nil:
		return "ok"
	case ctx.Err() != nil:
		return "cancelled"
	case errors.As(err, &apiErr):
		return "http_" + strconv.Itoa(apiErr.StatusCode)
	case errors.Is(err, errStalled):
		return "timeout"
	case errors.As(err, &streamErr):
		return "stream_error"
	case errors.Is(err, errEmptyStream):
		return "empty"
	}
	return "network"
}
