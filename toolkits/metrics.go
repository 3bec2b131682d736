package toolkits

import "github.com/prometheus/client_golang/prometheus"

// What a quota refusal refused (sandchat_quota_refusals_total's what).
const (
	RefusedUpload    = "upload"    // an upload, refused with 413
	RefusedState     = "state"     // a run's save of its session's state
	RefusedArtifacts = "artifacts" // files a run made, not kept
)

// Collectors are the Python sandbox's metrics; main registers them.
func (s *Sandbox) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.quotaRefusals()}
}

func (s *Sandbox) quotaRefusals() *prometheus.CounterVec {
	s.metricsOnce.Do(func() {
		s.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandchat_quota_refusals_total",
			Help: "Writes refused because a conversation's storage quota is full, by what was refused: upload, state, artifacts.",
		}, []string{"what"})
	})
	return s.refusals
}

// refused counts a write the conversation's quota refused.
func (s *Sandbox) refused(what string) { s.quotaRefusals().WithLabelValues(what).Inc() }
