package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// TestDisabledRouteSinkRetiresItsRoute: a publisher restarted with --sinks xds finds the
// route its HTTPRoute sink wrote before. A drain made meanwhile must not turn Published True
// on xDS alone while that route still carries the undrained weights: the route is set to the
// drained weights, kept (Published False, RetiringDisabledSink, naming it) until the gateway
// accepted that generation, then removed with its Services, and only then is Published True.
func TestDisabledRouteSinkRetiresItsRoute(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	first := f.startPublisher()
	f.waitPublished()
	require.Equal(t, int32(1), f.routeWeights("worker-a", "worker-b")["worker-a"], "the route carries the undrained weights")
	first.stop(t)

	f.gw.Pause() // the gateway does not accept the route's next generation until resumed
	f.drain(seedDrain)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	w, err := tmc.OmeV1beta1().TrafficMaps(f.ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	defer w.Stop()
	f.startPublisher(func(c *publish.Config) { c.Sinks, c.XDSAddress = []string{publish.SinkXDS}, "127.0.0.1:0" })

	routeName := f.ns + "/" + httproute.RouteName(service)
	acceptance := httproute.Config{Gateway: types.NamespacedName{Namespace: f.ns, Name: gatewayName}}
	announced, retiring := false, false
	for done := false; !done; {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-ctx.Done():
			t.Fatalf("Published did not turn True after the retirement (retiring seen: %t)", retiring)
		}
		tm, ok := ev.Object.(*v1beta1.TrafficMap)
		if !ok || tm.Name != service {
			continue
		}
		cond := published(tm)
		switch {
		case cond == nil:
		case cond.Status == metav1.ConditionFalse:
			announced = true // the second publisher has taken the map up
			if cond.Reason == string(model.ReasonRetiringDisabledSink) {
				assert.Contains(t, cond.Message, routeName, "the reason names the route")
				if !retiring {
					retiring = true
					f.gw.Resume()
				}
			}
		case announced && cond.ObservedGeneration == tm.Generation:
			route := f.route()
			if route != nil {
				weights := f.routeWeights("worker-a", "worker-b")
				verdict := acceptance.Acceptance(route).Verdict
				if weights["worker-a"] != 0 || verdict != httproute.Accepted {
					t.Fatalf("Published True (%s) while route %s carries %v (drained worker-a: 0), gateway verdict %v",
						cond.Message, routeName, weights, verdict)
				}
				continue
			}
			done = true
		}
	}
	assert.True(t, retiring, "Published said RetiringDisabledSink while the route was kept")
	require.Eventually(t, func() bool { return len(f.ownedServices()) == 0 }, waitTimeout, tick, "the route's Services go with it")
	assert.Eventually(t, func() bool {
		for _, e := range f.events() {
			if e.Reason == string(model.ReasonRetiringDisabledSink) {
				return true
			}
		}
		return false
	}, waitTimeout, tick, "an Event with reason RetiringDisabledSink")
}
