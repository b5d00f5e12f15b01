package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// testMap is a map in namespace chaos for service chat with entries worker-a..c at weights 1, 2, 3.
func testMap(change func(*v1beta1.TrafficMap)) *v1beta1.TrafficMap {
	tm := &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "chaos", Name: "chat"},
		Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
			{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1},
			{Cluster: "worker-b", Endpoint: "https://b.example.com:8443", Weight: 2},
			{Cluster: "worker-c", Endpoint: "http://c.example.com/", Weight: 3},
		}},
	}
	if change != nil {
		change(tm)
	}
	return tm
}

func TestExpect(t *testing.T) {
	noExec := `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`
	rampDown := func(step int, holds string) string {
		return `{"worker-a":{"direction":"down","start":"2026-12-03T10:00:00Z","duration":"6s","steps":3,"step":` +
			string(rune('0'+step)) + `,"from":1,"holds":[` + holds + `]}}`
	}
	tests := []struct {
		name    string
		o       observed
		allowed bool
		weights string // canonical
		host    string
		why     string // a prefix of Why when not allowed
	}{
		{name: "plain", o: observed{Map: testMap(nil), ISVC: map[string]string{}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "global-host wins over the template, trimmed",
			o:       observed{Map: testMap(nil), ISVC: map[string]string{v1beta1.AnnotationGlobalHost: " chat.example.org "}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.example.org"},
		{name: "no map", o: observed{ISVC: map[string]string{}}, why: "no trafficmap"},
		{name: "no inferenceservice", o: observed{Map: testMap(nil), HostTemplate: hostTmpl}, why: "no inferenceservice"},
		{name: "deleting", o: observed{Map: testMap(func(tm *v1beta1.TrafficMap) { tm.DeletionTimestamp = &metav1.Time{} }), ISVC: map[string]string{}, HostTemplate: hostTmpl},
			why: "the trafficmap is being deleted"},
		{name: "no hostname", o: observed{Map: testMap(nil), ISVC: map[string]string{}}, why: "RouteRefused"},
		{name: "IP hostname", o: observed{Map: testMap(nil), ISVC: map[string]string{v1beta1.AnnotationGlobalHost: "10.0.0.1"}}, why: "RouteRefused"},
		{name: "another namespace's gRPC name", o: observed{Map: testMap(nil), ISVC: map[string]string{v1beta1.AnnotationGlobalHost: "chat.prod"}}, why: "HostnameNotEntitled"},
		{name: "own namespace's gRPC name", o: observed{Map: testMap(nil), ISVC: map[string]string{v1beta1.AnnotationGlobalHost: "chat.chaos"}},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos"},
		{name: "duplicate cluster", o: observed{Map: testMap(func(tm *v1beta1.TrafficMap) { tm.Spec.Entries[1].Cluster = "worker-a" }), ISVC: map[string]string{}, HostTemplate: hostTmpl},
			why: "InvalidTrafficMap"},
		{name: "IP endpoint, service-externalname", o: observed{Map: testMap(func(tm *v1beta1.TrafficMap) { tm.Spec.Entries[0].Endpoint = "http://198.18.0.2:8080" }), ISVC: map[string]string{}, HostTemplate: hostTmpl},
			why: "RouteRefused: the endpoint host is an IP address"},
		{name: "IP endpoint, a backend kind that takes IPs", o: observed{Map: testMap(func(tm *v1beta1.TrafficMap) { tm.Spec.Entries[0].Endpoint = "http://198.18.0.2:8080" }), ISVC: map[string]string{}, HostTemplate: hostTmpl, IPEndpoints: true},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "weight out of range", o: observed{Map: testMap(func(tm *v1beta1.TrafficMap) { tm.Spec.Entries[0].Weight = 1_000_001 }), ISVC: map[string]string{}, HostTemplate: hostTmpl},
			why: "InvalidTrafficMap"},
		{name: "annotation drain by cluster",
			o:       observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m-1":{"cluster":"worker-b","reason":"r"}}`}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-c=3", host: "chat.chaos.example.com"},
		{name: "pending drain moves nothing",
			o:       observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m-1":{"cluster":"worker-z","reason":"r"}}`}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "drainRefs hold an entry without the annotation",
			o:       observed{Map: testMap(func(tm *v1beta1.TrafficMap) { tm.Spec.Entries[2].DrainRefs = []string{"m-1"} }), ISVC: map[string]string{}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2", host: "chat.chaos.example.com"},
		{name: "empty drain annotation is malformed", o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: ""}, HostTemplate: hostTmpl}, why: "InvalidDrainAnnotation"},
		{name: "drain without reason", o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m-1":{"cluster":"worker-a"}}`}, HostTemplate: hostTmpl}, why: "InvalidDrainAnnotation"},
		{name: "drain with unknown field", o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m-1":{"cluster":"worker-a","reason":"r","x":"y"}}`}, HostTemplate: hostTmpl}, why: "InvalidDrainAnnotation"},
		{name: "drain with untrimmed cluster", o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m-1":{"cluster":" worker-a","reason":"r"}}`}, HostTemplate: hostTmpl}, why: "InvalidDrainAnnotation"},
		{name: "drain with trailing data", o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{} {}`}, HostTemplate: hostTmpl}, why: "InvalidDrainAnnotation"},
		{name: "drain duplicate id", o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"a":{"cluster":"worker-a","reason":"r"},"a":{"cluster":"worker-b","reason":"r"}}`}, HostTemplate: hostTmpl}, why: "InvalidDrainAnnotation"},
		{name: "empty drain object", o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{}`}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "all drained publishes all zeros",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"a":{"cluster":"worker-a","reason":"r"},"b":{"cluster":"worker-b","reason":"r"},"c":{"cluster":"worker-c","reason":"r"}}`},
				HostTemplate: hostTmpl},
			allowed: true, weights: "", host: "chat.chaos.example.com"},
		{name: "NoExecute taint not tolerated", o: observed{Map: testMap(nil), ISVC: map[string]string{}, Taints: map[string]string{"worker-a": noExec}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "NoSchedule moves nothing",
			o:       observed{Map: testMap(nil), ISVC: map[string]string{}, Taints: map[string]string{"worker-a": `[{"key":"maintenance","effect":"NoSchedule"}]`}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "taint on a cluster with no entry", o: observed{Map: testMap(nil), ISVC: map[string]string{}, Taints: map[string]string{"worker-z": noExec}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "malformed taints of a cluster with no entry do not matter",
			o:       observed{Map: testMap(nil), ISVC: map[string]string{}, Taints: map[string]string{"worker-z": `{`}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "tolerated by Exists",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annTolerations: `[{"key":"maintenance","operator":"Exists"}]`}, Taints: map[string]string{"worker-a": noExec},
				HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "tolerated by Equal",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annTolerations: `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`}, Taints: map[string]string{"worker-a": noExec},
				HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "Equal with another value does not tolerate",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annTolerations: `[{"key":"maintenance","operator":"Equal","value":"other"}]`}, Taints: map[string]string{"worker-a": noExec},
				HostTemplate: hostTmpl},
			allowed: true, weights: "worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "empty key Exists tolerates everything",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annTolerations: `[{"operator":"Exists"}]`}, Taints: map[string]string{"worker-a": noExec, "worker-b": `[{"key":"x","effect":"NoExecute"}]`},
				HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "a NoSchedule toleration does not tolerate NoExecute",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annTolerations: `[{"key":"maintenance","operator":"Exists","effect":"NoSchedule"}]`}, Taints: map[string]string{"worker-a": noExec},
				HostTemplate: hostTmpl},
			allowed: true, weights: "worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "taint and drain on one cluster", o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m":{"cluster":"worker-a","reason":"r"}}`}, Taints: map[string]string{"worker-a": noExec},
			HostTemplate: hostTmpl}, allowed: true, weights: "worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "malformed taints", o: observed{Map: testMap(nil), ISVC: map[string]string{}, Taints: map[string]string{"worker-a": `[{"key":"m","effect":"Sometimes"}]`}, HostTemplate: hostTmpl},
			why: "InvalidTaints"},
		{name: "duplicate taint", o: observed{Map: testMap(nil), ISVC: map[string]string{}, Taints: map[string]string{"worker-a": `[{"key":"m","effect":"NoExecute"},{"key":"m","value":"v","effect":"NoExecute"}]`},
			HostTemplate: hostTmpl}, why: "InvalidTaints"},
		{name: "taints null and empty list", o: observed{Map: testMap(nil), ISVC: map[string]string{}, Taints: map[string]string{"worker-a": `null`, "worker-b": `[]`}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "empty key without Exists", o: observed{Map: testMap(nil), ISVC: map[string]string{annTolerations: `[{"key":""}]`}, HostTemplate: hostTmpl}, why: "InvalidTolerations"},
		{name: "Exists with a value", o: observed{Map: testMap(nil), ISVC: map[string]string{annTolerations: `[{"key":"m","operator":"Exists","value":"v"}]`}, HostTemplate: hostTmpl},
			why: "InvalidTolerations"},
		{name: "tolerations not a list", o: observed{Map: testMap(nil), ISVC: map[string]string{annTolerations: `{}`}, HostTemplate: hostTmpl}, why: "InvalidTolerations"},
		{name: "down ramp mid-way",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m":{"cluster":"worker-a","reason":"r"}}`, annRamp: rampDown(1, `"m"`)},
				HostTemplate: hostTmpl},
			why: "Ramping"},
		{name: "down ramp mid-way with OME's weight 0 and drainRefs",
			o: observed{Map: testMap(func(tm *v1beta1.TrafficMap) {
				tm.Spec.Entries[0].Weight, tm.Spec.Entries[0].DrainRefs = 0, []string{"m"}
			}),
				ISVC: map[string]string{annDrain: `{"m":{"cluster":"worker-a","reason":"r"}}`, annRamp: rampDown(0, `"m"`)}, HostTemplate: hostTmpl},
			why: "Ramping"},
		{name: "down ramp at its last step shapes nothing",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m":{"cluster":"worker-a","reason":"r"}}`, annRamp: rampDown(3, `"m"`)},
				HostTemplate: hostTmpl},
			allowed: true, weights: "worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "a drain the ramp does not list takes effect at once",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m":{"cluster":"worker-a","reason":"r"},"n":{"cluster":"worker-a","reason":"r"}}`, annRamp: rampDown(1, `"m"`)},
				HostTemplate: hostTmpl},
			allowed: true, weights: "worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "an untolerated taint the ramp does not list takes effect at once",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annDrain: `{"m":{"cluster":"worker-a","reason":"r"}}`, annRamp: rampDown(1, `"m"`)},
				Taints: map[string]string{"worker-a": noExec}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "a ramped taint",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annRamp: rampDown(2, `"maintenance=planned:NoExecute"`)},
				Taints: map[string]string{"worker-a": noExec}, HostTemplate: hostTmpl},
			why: "Ramping"},
		{name: "a down ramp on an undrained cluster shapes nothing",
			o:       observed{Map: testMap(nil), ISVC: map[string]string{annRamp: rampDown(1, `"m"`)}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "up ramp mid-way",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annRamp: `{"worker-b":{"direction":"up","start":"2026-12-03T10:00:00Z","duration":"6s","steps":3,"step":2}}`},
				HostTemplate: hostTmpl},
			why: "Ramping"},
		{name: "up ramp on a drained cluster shapes nothing",
			o: observed{Map: testMap(func(tm *v1beta1.TrafficMap) { tm.Spec.Entries[1].DrainRefs = []string{"m"} }),
				ISVC: map[string]string{annRamp: `{"worker-b":{"direction":"up","start":"2026-12-03T10:00:00Z","duration":"6s","steps":3,"step":0}}`}, HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-c=3", host: "chat.chaos.example.com"},
		{name: "ramp for a cluster with no entry",
			o: observed{Map: testMap(nil), ISVC: map[string]string{annRamp: `{"worker-z":{"direction":"up","start":"2026-12-03T10:00:00Z","duration":"6s","steps":3,"step":0}}`},
				HostTemplate: hostTmpl},
			allowed: true, weights: "worker-a=1,worker-b=2,worker-c=3", host: "chat.chaos.example.com"},
		{name: "malformed ramp",
			o:   observed{Map: testMap(nil), ISVC: map[string]string{annRamp: `{"worker-a":{"direction":"sideways","start":"2026-12-03T10:00:00Z","duration":"6s"}}`}, HostTemplate: hostTmpl},
			why: "InvalidRampAnnotation"},
		{name: "down ramp without holds",
			o:   observed{Map: testMap(nil), ISVC: map[string]string{annRamp: `{"worker-a":{"direction":"down","start":"2026-12-03T10:00:00Z","duration":"6s"}}`}, HostTemplate: hostTmpl},
			why: "InvalidRampAnnotation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := expect(tc.o)
			assert.Equal(t, tc.allowed, v.TrueAllowed, "TrueAllowed (why: %s)", v.Why)
			if !tc.allowed {
				assert.Contains(t, v.Why, tc.why)
				return
			}
			assert.Equal(t, tc.weights, canonical(v.Weights))
			assert.Len(t, v.Weights, len(tc.o.Map.Spec.Entries), "every entry has a weight, 0 included")
			assert.Equal(t, tc.host, v.Hostname)
		})
	}
}

func TestCanonical(t *testing.T) {
	assert.Empty(t, canonical(nil))
	assert.Empty(t, canonical(map[string]int32{"a": 0}))
	assert.Equal(t, "a=1,b=20,worker-10=3", canonical(map[string]int32{"worker-10": 3, "b": 20, "a": 1, "c": 0}))
}
