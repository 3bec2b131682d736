package frontendapi

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the HTTP layer's collectors. They are registered by main, with every
// other part's, in the process's registry (a registry per process, so several servers
// in one test process do not collide).
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// DurationBuckets reach 300 s, the longest a sandbox run may take, so that a slow run's
// request is measured instead of falling past the last bucket.
var DurationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// hubMetrics are the hub's collectors; main registers them with Server.Registry.
type hubMetrics struct {
	clients    prometheus.Gauge
	slowClosed prometheus.Counter
	dropped    prometheus.Counter
}

func newHubMetrics() *hubMetrics {
	return &hubMetrics{
		clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandchat_ws_clients", Help: "Open WebSocket connections on this node.",
		}),
		slowClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandchat_ws_slow_disconnects_total", Help: "WebSockets closed because the client did not keep up.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandchat_ws_pubsub_dropped_total", Help: "Pub/sub messages that could not be decoded.",
		}),
	}
}

// Collectors are the hub's metrics.
func (h *Hub) Collectors() []prometheus.Collector {
	return []prometheus.Collector{h.metrics.clients, h.metrics.slowClosed, h.metrics.dropped}
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandchat_http_requests_total", Help: "HTTP requests by route and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandchat_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: DurationBuckets,
		}, []string{"method", "route"}),
	}
}

// Collectors are the HTTP layer's metrics; main registers them with the hub's.
func (s *Server) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.metrics.requests, s.metrics.duration}
}

// count records one answered request.
func (m *metrics) count(method, route string, status int, took time.Duration) {
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(method, route).Observe(took.Seconds())
}

// labels are a request's method and route as metrics and logs name them. Labels
// outlive the request: Prometheus keeps them as map keys. Fiber's strings are views
// into fasthttp's reused buffers, so each is copied, and what a client chooses freely
// (path, method) is bounded so it cannot blow up the series count.
func labels(c *fiber.Ctx) (method, route string) {
	route = "unmatched"
	if c.Locals(localUnmatched) == nil {
		route = utils.CopyString(c.Route().Path)
	}
	method = "OTHER"
	switch c.Method() {
	case fiber.MethodGet, fiber.MethodHead, fiber.MethodPost, fiber.MethodPut, fiber.MethodPatch,
		fiber.MethodDelete, fiber.MethodOptions:
		method = utils.CopyString(c.Method())
	}
	return method, route
}

// localUnmatched is set by the catch-all handler, whose route would otherwise label
// every unknown path alike with "/" and hide that it matched nothing.
const localUnmatched = "sandchat.unmatched"
