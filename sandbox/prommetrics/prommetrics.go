// Package prommetrics is the sandbox engine's Prometheus face: Observer counts and
// times what the engine tells its sandbox.Observer (runs, waits for a process,
// restores, checkpoints, process starts, the kernel's kills, resets), and StatusCollector
// reads the engine's Status at each scrape for what is a level rather than an event
// (availability, sessions, processes, the pool, the admission queue). Main registers
// both in the process's registry; the names are the operator's contract
// (docs/operating.md, deploy/prometheus/alerts.yml, deploy/grafana/sandchat.json).
package prommetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandchat/sandchat/sandbox"
)

// Buckets, in seconds. A run may take up to 300 s (the largest time limit); a wait for
// a process ends at the admission timeout; a restore is bounded by its own timeout.
var (
	runBuckets        = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	admissionBuckets  = []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	restoreBuckets    = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	checkpointBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
)

// noInterpreter is restored_from's value for a run that never reached one (refused).
const noInterpreter = "none"

// Observer is a sandbox.Observer that keeps Prometheus metrics. Its methods only touch
// the metrics' own atomics, as the engine requires of an Observer.
type Observer struct {
	runs               *prometheus.CounterVec
	runDuration        *prometheus.HistogramVec
	admissionWait      prometheus.Histogram
	restoreDuration    *prometheus.HistogramVec
	checkpointDuration prometheus.Histogram
	checkpointFailures prometheus.Counter
	processStarts      prometheus.Counter
	oomKills           prometheus.Counter
	resets             *prometheus.CounterVec
}

var _ sandbox.Observer = (*Observer)(nil)

// NewObserver returns an Observer whose metrics are not registered yet (Collectors).
func NewObserver() *Observer {
	return &Observer{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandchat_sandbox_runs_total",
			Help: "Sandbox runs, by status (success, error, timeout; failed: the engine could not complete it; refused: it never started) and where the interpreter came from (live, snapshot, replay, fresh; none when refused).",
		}, []string{"status", "restored_from"}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandchat_sandbox_run_duration_seconds", Help: "Sandbox runs from their check to their answer (waits and restores included), by status.",
			Buckets: runBuckets,
		}, []string{"status"}),
		admissionWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandchat_sandbox_admission_wait_seconds", Help: "How long runs that needed a session process waited for room on the node.",
			Buckets: admissionBuckets,
		}),
		restoreDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandchat_sandbox_restore_duration_seconds", Help: "Sessions brought into a process that did not hold them, by where from (snapshot, replay, fresh).",
			Buckets: restoreBuckets,
		}, []string{"from"}),
		checkpointDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandchat_sandbox_checkpoint_duration_seconds", Help: "Heap checkpoints attempted, failed ones included.",
			Buckets: checkpointBuckets,
		}),
		checkpointFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandchat_sandbox_checkpoint_failures_total", Help: "Heap checkpoints that failed or were put off (the session stays durable by its log).",
		}),
		processStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandchat_sandbox_process_starts_total", Help: "Session processes started (warm pool and spares included).",
		}),
		oomKills: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandchat_sandbox_oom_kills_total", Help: "Session processes the kernel killed for their memory cap.",
		}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandchat_sandbox_session_resets_total", Help: "Session resets, by cause: user, or broken (a saved state that could not run once restored).",
		}, []string{"cause"}),
	}
}

// Collectors are the Observer's metrics.
func (o *Observer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{o.runs, o.runDuration, o.admissionWait, o.restoreDuration, o.checkpointDuration,
		o.checkpointFailures, o.processStarts, o.oomKills, o.resets}
}

func (o *Observer) RunDone(status, restoredFrom string, took time.Duration) {
	if restoredFrom == "" {
		restoredFrom = noInterpreter
	}
	o.runs.WithLabelValues(status, restoredFrom).Inc()
	o.runDuration.WithLabelValues(status).Observe(took.Seconds())
}

func (o *Observer) AdmissionWaited(took time.Duration) { o.admissionWait.Observe(took.Seconds()) }

func (o *Observer) Restored(from string, took time.Duration) {
	o.restoreDuration.WithLabelValues(from).Observe(took.Seconds())
}

func (o *Observer) Checkpointed(took time.Duration, err error) {
	o.checkpointDuration.Observe(took.Seconds())
	if err != nil {
		o.checkpointFailures.Inc()
	}
}

func (o *Observer) ProcessStarted()           { o.processStarts.Inc() }
func (o *Observer) OOMKilled()                { o.oomKills.Inc() }
func (o *Observer) SessionReset(cause string) { o.resets.WithLabelValues(cause).Inc() }

// Engine is what StatusCollector reads (sandbox.Engine).
type Engine interface {
	Status(ctx context.Context) sandbox.Status
}

// StatusCollector reports the engine's levels, read from its Status at each scrape.
type StatusCollector struct {
	engine Engine
	// timeout bounds a scrape's read of the engine.
	timeout time.Duration
}

// NewStatusCollector reads e at each scrape.
func NewStatusCollector(e Engine) *StatusCollector {
	return &StatusCollector{engine: e, timeout: 5 * time.Second}
}

var (
	descAvailable = prometheus.NewDesc("sandchat_sandbox_available",
		"1 when the Python sandbox runs code on this node, 0 while it starts or cannot (/api/v1/sandbox/status says why).", nil, nil)
	descLive = prometheus.NewDesc("sandchat_sandbox_live_sessions",
		"Sessions whose interpreter is warm in a process on this node.", nil, nil)
	descProcesses = prometheus.NewDesc("sandchat_sandbox_processes",
		"Session processes on this node: live sessions, the warm pool and spares.", nil, nil)
	descMaxProcesses = prometheus.NewDesc("sandchat_sandbox_max_processes",
		"The node's bound on session processes (SANDCHAT_SANDBOX_MAX_PROCESSES, or derived).", nil, nil)
	descWarmPool = prometheus.NewDesc("sandchat_sandbox_warm_pool",
		"Warm processes waiting for new conversations.", nil, nil)
	descSpares = prometheus.NewDesc("sandchat_sandbox_spares",
		"Warm processes waiting to restore saved sessions.", nil, nil)
	descWaiting = prometheus.NewDesc("sandchat_sandbox_admission_waiting",
		"Runs waiting for room under the node's process bound.", nil, nil)
)

func (c *StatusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAvailable, descLive, descProcesses, descMaxProcesses, descWarmPool, descSpares, descWaiting} {
		ch <- d
	}
}

func (c *StatusCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s := c.engine.Status(ctx)
	available := 0.0
	if s.Available {
		available = 1
	}
	for d, v := range map[*prometheus.Desc]int{descLive: s.LiveSess, descProcesses: s.Processes, descMaxProcesses: s.MaxProcesses,
		descWarmPool: s.WarmPool, descSpares: s.Spares, descWaiting: s.Waiting} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	ch <- prometheus.MustNewConstMetric(descAvailable, prometheus.GaugeValue, available)
}
