package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// testSlice is an EndpointSlice of svc, managed by the publisher, with one endpoint per
// address, ready unless listed in notReady (nil Ready for "nil:"-prefixed addresses).
func testSlice(svc string, addrs []string, notReady ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos", Name: svc + "-ipv4",
		Labels: map[string]string{labelServiceName: svc, labelSliceManagedBy: sliceManagedBy}}}
	for _, a := range addrs {
		e := discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
		for _, n := range notReady {
			if n == a {
				e.Conditions.Ready = ptr.To(false)
			}
		}
		if a == "198.18.7.99" {
			e.Conditions.Ready = nil
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}

func TestJudgeSliceAddresses(t *testing.T) {
	tm := testMap(func(tm *v1beta1.TrafficMap) {
		tm.Spec.Entries[0].Endpoint = "http://worker-a.backends.chaos.test:8080"
		tm.Spec.Entries[1].Endpoint = "http://198.18.7.3:8080"
		tm.Spec.Entries[2].Endpoint = "http://unknown.example.com:8080"
	})
	route := &gwapiv1.HTTPRoute{Spec: gwapiv1.HTTPRouteSpec{Rules: []gwapiv1.HTTPRouteRule{{BackendRefs: []gwapiv1.HTTPBackendRef{
		{BackendRef: gwapiv1.BackendRef{BackendObjectReference: gwapiv1.BackendObjectReference{Name: "chat-worker-a-1"}}},
		{BackendRef: gwapiv1.BackendRef{BackendObjectReference: gwapiv1.BackendObjectReference{Name: "chat-worker-b-1"}}},
		{BackendRef: gwapiv1.BackendRef{BackendObjectReference: gwapiv1.BackendObjectReference{Name: "chat-worker-c-1"}}},
	}}}}}
	clusters := map[string]string{"chat-worker-a-1": "worker-a", "chat-worker-b-1": "worker-b", "chat-worker-c-1": "worker-c"}
	dns := func(answer ...string) func(string) ([]string, bool) {
		return func(host string) ([]string, bool) {
			if host == "worker-a.backends.chaos.test" {
				return answer, true
			}
			return nil, false
		}
	}
	tests := []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		dns    func(string) ([]string, bool)
		route  *gwapiv1.HTTPRoute
		want   []string // the services with a problem
	}{
		{name: "slices hold the answer and the IP",
			slices: []*discoveryv1.EndpointSlice{testSlice("chat-worker-a-1", []string{"198.18.7.2"}), testSlice("chat-worker-b-1", []string{"198.18.7.3"})},
			dns:    dns("198.18.7.2")},
		{name: "the answer moved, the slice did not",
			slices: []*discoveryv1.EndpointSlice{testSlice("chat-worker-a-1", []string{"198.18.7.2"}), testSlice("chat-worker-b-1", []string{"198.18.7.3"})},
			dns:    dns("198.18.7.5"), want: []string{"chat-worker-a-1"}},
		{name: "the answer widened, the slice holds one of the two",
			slices: []*discoveryv1.EndpointSlice{testSlice("chat-worker-a-1", []string{"198.18.7.2"}), testSlice("chat-worker-b-1", []string{"198.18.7.3"})},
			dns:    dns("198.18.7.5", "198.18.7.2"), want: []string{"chat-worker-a-1"}},
		{name: "two addresses over two slices, any order, duplicates",
			slices: []*discoveryv1.EndpointSlice{testSlice("chat-worker-a-1", []string{"198.18.7.5", "198.18.7.2"}), testSlice("chat-worker-a-1", []string{"198.18.7.2"}),
				testSlice("chat-worker-b-1", []string{"198.18.7.3"})},
			dns: dns("198.18.7.2", "198.18.7.5")},
		{name: "an endpoint not ready serves nothing",
			slices: []*discoveryv1.EndpointSlice{testSlice("chat-worker-a-1", []string{"198.18.7.2", "198.18.7.5"}, "198.18.7.2"), testSlice("chat-worker-b-1", []string{"198.18.7.3"})},
			dns:    dns("198.18.7.2", "198.18.7.5"), want: []string{"chat-worker-a-1"}},
		{name: "an endpoint without a ready condition serves nothing (Traefik)",
			slices: []*discoveryv1.EndpointSlice{testSlice("chat-worker-a-1", []string{"198.18.7.99"}), testSlice("chat-worker-b-1", []string{"198.18.7.3"})},
			dns:    dns("198.18.7.99"), want: []string{"chat-worker-a-1"}},
		{name: "no slice of the service",
			slices: []*discoveryv1.EndpointSlice{testSlice("chat-worker-b-1", []string{"198.18.7.3"})},
			dns:    dns("198.18.7.2"), want: []string{"chat-worker-a-1"}},
		{name: "an IP endpoint's slice holds another address",
			slices: []*discoveryv1.EndpointSlice{testSlice("chat-worker-a-1", []string{"198.18.7.2"}), testSlice("chat-worker-b-1", []string{"198.18.7.4"})},
			dns:    dns("198.18.7.2"), want: []string{"chat-worker-b-1"}},
		{name: "a slice of another manager does not count",
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := testSlice("chat-worker-a-1", []string{"198.18.7.2"})
				s.Labels[labelSliceManagedBy] = "endpointslice-controller.k8s.io"
				return s
			}(), testSlice("chat-worker-b-1", []string{"198.18.7.3"})},
			dns: dns("198.18.7.2"), want: []string{"chat-worker-a-1"}},
		{name: "no route: nothing to judge", route: &gwapiv1.HTTPRoute{}, dns: dns("198.18.7.2")},
		{name: "the rule off (no dns)", slices: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := cacheStore(t, tt.slices)
			st := stateAt{route: route, clusters: clusters, slices: slicesOf(store, "chaos")}
			if tt.route != nil {
				st.route = tt.route
			}
			problems := judgeSliceAddresses(tm, st, tt.dns)
			var got []string
			for _, p := range problems {
				assert.Contains(t, p, ruleSliceAddresses+": service ")
				for _, svc := range []string{"chat-worker-a-1", "chat-worker-b-1", "chat-worker-c-1"} {
					if containsWord(p, svc) {
						got = append(got, svc)
					}
				}
			}
			assert.Equal(t, tt.want, got, "%v", problems)
		})
	}
}

// cacheStore is a store holding slices (keyed by identity: test slices may share names).
func cacheStore(t *testing.T, slices []*discoveryv1.EndpointSlice) []cache.Store {
	t.Helper()
	s := cache.NewStore(func(o any) (string, error) { return fmt.Sprintf("%p", o), nil })
	for _, es := range slices {
		require.NoError(t, s.Add(es))
	}
	return []cache.Store{s}
}

// containsWord: problem p is about Service svc.
func containsWord(p, svc string) bool { return strings.Contains(p, "service "+svc+" ") }

// The judge counts how long the EndpointSlices took to follow the DNS: the True episodes
// that began with the rule, apart from the others.
func TestJudgedSlices(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	tr := newTracker()
	slice := ruleSliceAddresses + ": service s (entry worker-0, host h) has ready addresses [a], the dns answer is [b]"
	tr.step(t0, []look{{Map: "ns/a", True: true, Problems: []string{slice}}, {Map: "ns/b", True: true, Problems: []string{"route weights: x"}}})
	tr.step(t0.Add(1500*time.Millisecond), []look{{Map: "ns/a", True: true}, {Map: "ns/b", True: true, Problems: []string{"route weights: x"}}})
	tr.step(t0.Add(2*time.Second), []look{{Map: "ns/a", True: true}, {Map: "ns/b", True: true}})
	j := tr.judge(t0.Add(3*time.Second), func(time.Time, time.Duration) time.Duration { return 0 })
	assert.Equal(t, []time.Duration{1500 * time.Millisecond}, j.Slices)
	assert.Len(t, j.Retract, 2)
	assert.Empty(t, j.Lies)
}
