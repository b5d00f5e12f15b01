package report

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheck(t *testing.T) {
	ok := func() Status {
		return Status{Generation: 2,
			Clusters:  []Cluster{{Cluster: "worker-a", Weight: 1, Effective: ptr(int32(0))}, {Cluster: "worker-b", Weight: 1, Effective: ptr(int32(1))}},
			Published: Published{Status: "True", Reason: "Published", ObservedGeneration: 2, Freshness: Current},
			Sinks: Sinks{HTTPRoute: RouteSink{Name: "prod/chat-global", Found: true, Owned: true, MatchesComputed: true,
				Weights: []RouteWeight{{Cluster: "worker-a", Weight: 0}, {Cluster: "worker-b", Weight: 1}}}}}
	}
	assert.NoError(t, Check(ok()))
	noRoute := ok()
	noRoute.Sinks.HTTPRoute = RouteSink{Name: "prod/chat-global"}
	assert.NoError(t, Check(noRoute), "without a route (the xds sink alone) the condition tells")

	for _, tc := range []struct {
		name   string
		change func(*Status)
		want   string
	}{
		{"no weights", func(s *Status) { s.Error = "inferenceservice prod/chat named by spec.service does not exist" },
			"not published: effective weights cannot be computed: inferenceservice prod/chat named by spec.service does not exist"},
		{"not true", func(s *Status) {
			s.Published.Status, s.Published.Reason, s.Published.Message = "False", "Publishing", "publisher drain of m on worker-a requested; not yet published"
		}, "not published: published is False (Publishing): publisher drain of m on worker-a requested; not yet published"},
		{"stale", func(s *Status) { s.Published.ObservedGeneration, s.Published.Freshness = 1, Stale },
			"not published: published at generation 1, the trafficmap is at generation 2"},
		{"foreign route", func(s *Status) { s.Sinks.HTTPRoute.Owned = false }, "not published: route prod/chat-global is not the publisher's"},
		{"route differs", func(s *Status) {
			s.Sinks.HTTPRoute.MatchesComputed = false
			s.Sinks.HTTPRoute.Weights = []RouteWeight{{Cluster: "worker-a", Weight: 1}, {Backend: "stray", Weight: 1}}
		}, "not published: route prod/chat-global holds worker-a=1, stray=1, the inputs give worker-a=0, worker-b=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok()
			tc.change(&s)
			err := Check(s)
			assert.ErrorIs(t, err, ErrNotPublished)
			assert.EqualError(t, err, tc.want)
		})
	}
}
