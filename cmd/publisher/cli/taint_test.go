package cli

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/drain"
	"github.com/trafficmap/publisher/report"
)

// Invalid taint and untaint input is refused before any API client exists.
func TestTaintRefusalsBeforeAnyAPIUse(t *testing.T) {
	kc := []string{"--kubeconfig", "/nonexistent/kubeconfig"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no taint", []string{"taint", "worker-a"}, "exactly a workload cluster and a taint are required: taint CLUSTER KEY[=VALUE]:EFFECT"},
		{"untaint usage", []string{"untaint"}, "exactly a workload cluster and a taint are required: untaint CLUSTER KEY[:EFFECT]"},
		{"bad cluster", []string{"taint", "Worker_A", "k:NoExecute"}, `workload cluster "Worker_A" must be a DNS-1123 subdomain`},
		{"no effect", []string{"taint", "worker-a", "k=v"}, `taint "k=v": must be KEY[=VALUE]:EFFECT, EFFECT NoExecute or NoSchedule`},
		{"bad effect", []string{"taint", "worker-a", "k:Later"}, `taint "k:Later": taint [0] (key "k"): effect "Later" must be NoSchedule or NoExecute`},
		{"bad source", []string{"taint", "worker-a", "k:NoExecute", "--source", "Node"}, "--source must be one of auto, InferenceCluster, WorkloadCluster"},
		{"bad output", []string{"untaint", "worker-a", "k", "-o", "xml"}, "output must be table, wide, json or yaml"},
		{"--wait with a dry run", []string{"taint", "worker-a", "k:NoExecute", "--wait", "--dry-run=server"}, "--wait waits for an applied change; a dry run applies none"},
		{"unknown flag", []string{"untaint", "worker-a", "k", "--id", "x"}, "invalid untaint flags: unknown flag: --id; use --help"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runMain(context.Background(), append(tc.args, kc...), &stdout, &stderr)
			assert.Equal(t, exitFailure, code)
			assert.Empty(t, stdout.String())
			assert.Equal(t, "error: "+tc.want+"\n", stderr.String())
		})
	}
}

// --wait after a taint: done once the status's effective weights are the previewed
// after-weights and the map is Published with them, written after the flip.
func TestTaintPublishedDecision(t *testing.T) {
	zero, one := int32(0), int32(1)
	imp := report.Impact{Namespace: "prod", TrafficMap: "chat", Service: "chat", Clusters: []report.ImpactCluster{
		{Cluster: "worker-a", Weight: 1, Before: &one, After: &zero}, {Cluster: "worker-b", Weight: 1, Before: &one, After: &one}}}
	flip := drain.Flip{Map: &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "50"}},
		Condition: metav1.Condition{Type: v1beta1.ConditionPublished, Status: metav1.ConditionFalse}}
	done := taintPublished(imp, flip)
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Generation: 2, ResourceVersion: "52"},
		Status: v1beta1.TrafficMapStatus{Conditions: []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: metav1.ConditionTrue,
			Reason: "Published", Message: "weights worker-a=0, worker-b=1", ObservedGeneration: 2}}}}
	st := report.Status{Generation: 2, Clusters: []report.Cluster{{Cluster: "worker-a", Effective: &zero}, {Cluster: "worker-b", Effective: &one}},
		Published: report.Published{Status: "True", ObservedGeneration: 2, Freshness: report.Current},
		Sinks:     report.Sinks{HTTPRoute: report.RouteSink{Found: true, Owned: true, MatchesComputed: true}}}
	msg, ok := done(tm, st)
	assert.True(t, ok, msg)
	assert.Equal(t, "weights worker-a=0, worker-b=1", msg)

	st.Clusters[0].Effective = &one
	msg, ok = done(tm, st)
	assert.False(t, ok)
	assert.Equal(t, "the effective weights are not yet the previewed ones (worker-a=0, worker-b=1)", msg)
	st.Clusters[0].Effective = &zero

	tm.ResourceVersion = "50"
	msg, ok = done(tm, st)
	assert.False(t, ok)
	assert.Equal(t, "the publisher has not written the status since the change", msg)
}
