package frontendapi

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics lives in a registry of its own, so several servers in one test process do
// not collide, and other packages register their collectors on it.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

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
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandchat_http_requests_total", Help: "HTTP requests by route and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandchat_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
	}
	m.reg.MustRegister(m.requests, m.duration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where other parts of the process add their collectors.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

func (m *metrics) middleware(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	status := c.Response().StatusCode()
	if err != nil {
		// The error handler has not run yet; count what it will most likely answer.
		if fe, ok := err.(*fiber.Error); ok {
			status = fe.Code
		} else {
			status = codeStatus[codeOf(lastResort(c, err))]
		}
	}
	// Labels outlive the request: Prometheus keeps them as map keys. Fiber's strings
	// are views into fasthttp's reused buffers, so each is copied, and what a client
	// chooses freely (path, method) is bounded so it cannot blow up the series count.
	route := "unmatched"
	if c.Locals(localUnmatched) == nil {
		route = utils.CopyString(c.Route().Path)
	}
	method := "OTHER"
	switch c.Method() {
	case fiber.MethodGet, fiber.MethodHead, fiber.MethodPost, fiber.MethodPut, fiber.MethodPatch,
		fiber.MethodDelete, fiber.MethodOptions:
		method = utils.CopyString(c.Method())
	}
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
	return err
}

// localUnmatched is set by the catch-all handler, whose route would otherwise label
// every unknown path alike with "/" and hide that it matched nothing.
const localUnmatched = "sandchat.unmatched"

func (m *metrics) handler() fiber.Handler {
	return adaptor.HTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}
