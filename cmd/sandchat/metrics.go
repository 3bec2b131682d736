package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandchat/sandchat/sandbox"
)

// baseCollectors are the metrics that belong to no part: the build, the Go runtime and
// the process. Each part exposes its own (Collectors), and registerMetrics puts them
// all in the process's registry.
func baseCollectors() []prometheus.Collector {
	deno, py := sandbox.Pinned()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sandchat_build_info", Help: "Always 1: this build's version and the Deno and Pyodide it pins.",
		ConstLabels: prometheus.Labels{"version": buildVersion(), "deno": deno, "pyodide": py},
	})
	build.Set(1)
	return []prometheus.Collector{build, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
}

// metricsHandler serves the registry in Prometheus' formats.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// metricsServer is the operator's listener (SANDCHAT_METRICS_ADDR): /metrics and Go's
// profiler under /debug/pprof/, kept off the public port, where neither is served.
type metricsServer struct {
	ln     net.Listener
	srv    *http.Server
	served chan error
}

func startMetricsServer(addr string, reg *prometheus.Registry) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler(reg))
	// No /debug/pprof/cmdline: the command line may hold a secret (--database-url's
	// password).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ms := &metricsServer{ln: ln, served: make(chan error, 1),
		// A CPU profile or a trace takes as long as asked (?seconds=), so no write timeout.
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}}
	go func() { ms.served <- ms.srv.Serve(ln) }()
	return ms, nil
}

// close stops the listener, letting a scrape in flight finish until ctx ends.
func (ms *metricsServer) close(ctx context.Context) error {
	err := ms.srv.Shutdown(ctx)
	if serr := <-ms.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
