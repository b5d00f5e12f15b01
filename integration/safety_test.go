package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// Exit codes of the operator commands (cmd/publisher).
const exitNoTrafficCode = 6

// Issue 16: the last-serving guard and the fleet taint commands, with the built binary.

// weightsTable is the preview's table of one service's effective weights.
func weightsTable(ns string, rows ...string) string {
	return fmt.Sprintf("Effective weights of InferenceService %s/chat (TrafficMap chat):\n", ns) + strings.Join(rows, "\n") + "\n"
}

// The seed's drain of worker-a while worker-b is drained: the guard refuses it with exit 6
// and changes nothing, in dry runs too; --allow-no-traffic --yes drains, and the preview's
// after-weights are what the publisher then publishes.
func TestOpsGuardRefusesLastServingDrain(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()
	op := admin(t)

	got := op.run(t, "drain", "chat", "-n", f.ns, "--workload-cluster", "worker-b", "--id", "maintenance-b", "--reason", "first", "--yes", "--wait")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stderr, weightsTable(f.ns,
		"  CLUSTER    WEIGHT   BEFORE   AFTER",
		"  worker-a   1        1        1",
		"  worker-b   1        1        0"))

	rv := f.isvc(service).GetResourceVersion()
	refusal := fmt.Sprintf("error: refused by the last-serving guard: draining worker-a leaves InferenceService %s/chat with no positive effective weight: "+
		"all traffic to the service would stop; pass --allow-no-traffic to drain anyway\n", f.ns)
	table := weightsTable(f.ns,
		"  CLUSTER    WEIGHT   BEFORE   AFTER",
		"  worker-a   1        1        0",
		"  worker-b   1        0        0",
		fmt.Sprintf("  NO TRAFFIC: all traffic to InferenceService %s/chat stops: no workload cluster keeps a positive effective weight.", f.ns))
	for _, extra := range [][]string{{"--yes"}, {"--yes", "--dry-run=server"}, {"--yes", "--dry-run=client"}, nil} {
		got = op.run(t, seedDrainArgs(f.ns, extra...)...)
		assert.Equal(t, exitNoTrafficCode, got.code, "%v: %s", extra, got.stderr)
		assert.True(t, strings.HasSuffix(got.stderr, table+refusal), "%v: %s", extra, got.stderr)
		assert.Empty(t, got.stdout)
		assert.Equal(t, rv, f.isvc(service).GetResourceVersion(), "nothing patched")
	}
	c := f.waitPublished()
	assert.NotContains(t, published(c).Message, "maintenance-a", "no flip was written")

	got = op.run(t, seedDrainArgs(f.ns, "--allow-no-traffic", "--yes", "--wait")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stderr, table)
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 0}, f.routeWeights("worker-a", "worker-b"), "the preview's after-weights are published")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 0}, effective(op.status(t, f.ns)))

	// An undrain is never refused: it shows the weights and restores traffic.
	got = op.run(t, undrainArgs(f.ns, "--yes", "--wait")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stderr, "  worker-a   1        0        1\n")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 0}, f.routeWeights("worker-a", "worker-b"))
}

// A taint on a workload cluster: the preview lists exactly the services that move, with
// their effective weights before and after (a tolerating service is not listed); a service
// the taint would leave without traffic makes it refused (exit 6, nothing changed); without
// it, taint --yes --wait returns once the moved map is Published with the new weights;
// status --workload-cluster lists what is left; untaint restores.
func TestOpsTaintPreviewGuardWaitAndUntaint(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap(fl.entries())
	f.startPublisher()
	f.waitPublished()

	tolerating := newFixture(t) // tolerates the taint: not moved
	tolerating.createMap(fl.entries())
	tolerating.tolerate(`[{"key":"maintenance","operator":"Exists","effect":"NoExecute"}]`)
	lastServing := newFixture(t) // fl.a is its only positive cluster
	lastServing.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: fl.a, Endpoint: "https://chat." + fl.a + ".example.com", Weight: 2, Healthy: true},
		{Cluster: fl.b, Endpoint: "https://chat." + fl.b + ".example.com", Weight: 0, Healthy: true},
	})
	setInferenceClusterTaints(t, fl.a, `[]`)
	op := admin(t)
	rvOf := func() string {
		u, err := dyn.Resource(model.InferenceClustersResource).Get(ctxFor(t), fl.a, metav1.GetOptions{})
		require.NoError(t, err)
		return u.GetResourceVersion()
	}
	taintsOf := func() any {
		u, err := dyn.Resource(model.InferenceClustersResource).Get(ctxFor(t), fl.a, metav1.GetOptions{})
		require.NoError(t, err)
		v, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "taints")
		return v
	}
	rv := rvOf()

	header := fmt.Sprintf("  %-*s   WEIGHT   BEFORE   AFTER", len(fl.a), "CLUSTER")
	moved := fmt.Sprintf(`Effective weights of InferenceService %[1]s/chat (TrafficMap chat):
%[4]s
  %[2]s   1        1        0
  %[3]s   1        1        1
`, f.ns, fl.a, fl.b, header)
	stopped := fmt.Sprintf(`Effective weights of InferenceService %[1]s/chat (TrafficMap chat):
%[4]s
  %[2]s   2        2        0
  %[3]s   0        0        0
  NO TRAFFIC: all traffic to InferenceService %[1]s/chat stops: no workload cluster keeps a positive effective weight.
`, lastServing.ns, fl.a, fl.b, header)
	for _, extra := range [][]string{{"--dry-run=client"}, {"--dry-run=server"}, nil} {
		got := op.run(t, append([]string{"taint", fl.a, "maintenance=planned:NoExecute", "--yes"}, extra...)...)
		assert.Equal(t, exitNoTrafficCode, got.code, "%v: %s", extra, got.stderr)
		assert.Contains(t, got.stderr, "Target            InferenceCluster/"+fl.a+"\n")
		assert.Contains(t, got.stderr, "Services moved    2\n")
		assert.Contains(t, got.stderr, moved)
		assert.Contains(t, got.stderr, stopped)
		assert.NotContains(t, got.stderr, tolerating.ns, "a service that tolerates the taint does not move")
		assert.True(t, strings.HasSuffix(got.stderr, fmt.Sprintf("error: refused by the last-serving guard: taint maintenance=planned:NoExecute on InferenceCluster %s: "+
			"it leaves %s/chat with no positive effective weight: all traffic to them would stop; pass --allow-no-traffic to proceed anyway\n", fl.a, lastServing.ns)), got.stderr)
		assert.Equal(t, rv, rvOf(), "nothing patched")
	}

	// Without the last-serving service, the taint goes through and waits.
	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(lastServing.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	got := op.run(t, "taint", fl.a, "maintenance=planned:NoExecute", "--dry-run=server", "--yes")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, rv, rvOf(), "a server dry run stores nothing")
	got = op.run(t, "taint", fl.a, "maintenance=planned:NoExecute", "--yes", "--wait=1m")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stderr, "Services moved    1\n")
	assert.Contains(t, got.stderr, moved)
	assert.Contains(t, got.stderr, "\nPublished: ")
	assert.Equal(t, []any{map[string]any{"key": "maintenance", "value": "planned", "effect": "NoExecute"}}, taintsOf())
	assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 1}, fl.weights(f), "Published with the previewed weights")
	assert.Contains(t, got.stdout, "services-moved   "+f.ns+"/chat\n")

	// What is left on the cluster: the tolerating service only.
	got = op.run(t, "status", "--workload-cluster", fl.a, "-A", "-o", "json")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stdout, `"namespace": "`+tolerating.ns+`"`)
	assert.NotContains(t, got.stdout, `"namespace": "`+f.ns+`"`)

	// A second identical taint is refused by validation.
	got = op.run(t, "taint", fl.a, "maintenance=other:NoExecute", "--yes")
	assert.Equal(t, 1, got.code)
	assert.Contains(t, got.stderr, "already has taint maintenance=planned:NoExecute")

	got = op.run(t, "untaint", fl.a, "maintenance", "--yes", "--wait=1m")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stderr, fmt.Sprintf("  %s   1        0        1\n", fl.a))
	assert.Equal(t, []any{}, taintsOf())
	assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 1}, fl.weights(f))
}

// The WorkloadCluster source: taint writes its annotation when it is the only object (or
// with --source), untaint removes the annotation; a cluster with neither object is refused.
func TestOpsTaintWorkloadClusterSource(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap(fl.entries())
	f.startPublisher()
	f.waitPublished()
	op := admin(t)

	got := op.run(t, "taint", fl.a, "maintenance=planned:NoExecute", "--yes")
	assert.Equal(t, 1, got.code)
	assert.Contains(t, got.stderr, "error: taint refused: no InferenceCluster or WorkloadCluster named "+fl.a)

	setWorkloadClusterTaints(t, fl.a, "", true)
	got = op.run(t, "taint", fl.a, "maintenance=planned:NoExecute", "--source", "WorkloadCluster", "--yes", "--wait=1m")
	require.Equal(t, 0, got.code, got.stderr)
	wc, err := dyn.Resource(model.WorkloadClustersResource).Get(ctxFor(t), fl.a, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`, wc.GetAnnotations()["publisher.trafficmap.dev/taints"])
	assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 1}, fl.weights(f))

	got = op.run(t, "untaint", fl.a, "maintenance:NoExecute", "--yes", "--wait=1m")
	require.Equal(t, 0, got.code, got.stderr)
	wc, err = dyn.Resource(model.WorkloadClustersResource).Get(ctxFor(t), fl.a, metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, wc.GetAnnotations(), "publisher.trafficmap.dev/taints")
	assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 1}, fl.weights(f))
}

// bindStatusReader lets user read what the last-serving guard reads besides the namespace's
// InferenceServices and TrafficMaps: the HTTPRoutes of the namespace and the cluster-scoped
// taint sources.
func (f *fixture) bindStatusReader(user string) {
	f.t.Helper()
	ctx := ctxFor(f.t)
	name := f.ns + "-" + user
	_, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"modelplane.ai"}, Resources: []string{"inferenceclusters"}, Verbs: []string{"get"}},
		{APIGroups: []string{"ome.io"}, Resources: []string{"workloadclusters"}, Verbs: []string{"get"}},
		{APIGroups: []string{"gateway.networking.k8s.io"}, Resources: []string{"httproutes"}, Verbs: []string{"get"}},
	}}, metav1.CreateOptions{})
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{})
	require.NoError(f.t, err)
	f.t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}
