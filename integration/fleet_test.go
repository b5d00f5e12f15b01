package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/weights"
)

// Fleet drains (issue 7): taints on InferenceClusters (spec.taints) and WorkloadClusters (an
// annotation), tolerations on the InferenceService. Cluster objects are cluster-scoped and so
// shared by every test: each test names its clusters after its own namespace.

const (
	maintenanceNoExecute  = `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`
	maintenanceNoSchedule = `[{"key":"maintenance","value":"planned","effect":"NoSchedule"}]`
	maintenanceTaint      = "taint maintenance=planned:NoExecute"
)

// fleet is a test's two workload clusters, named after the first fixture's namespace.
type fleet struct{ a, b string }

func newFleet(f *fixture) fleet {
	return fleet{a: f.ns + "-worker-a", b: f.ns + "-worker-b"}
}

func (fl fleet) entries() []v1beta1.TrafficMapEntry {
	return []v1beta1.TrafficMapEntry{
		{Cluster: fl.a, Endpoint: "https://chat." + fl.a + ".example.com", Weight: 1, Healthy: true},
		{Cluster: fl.b, Endpoint: "https://chat." + fl.b + ".example.com", Weight: 1, Healthy: true},
	}
}

// weights returns the fixture's route weights keyed by cluster.
func (fl fleet) weights(f *fixture) map[string]int32 { return f.routeWeights(fl.a, fl.b) }

// setInferenceClusterTaints creates or updates the InferenceCluster name with spec.taints set
// to the raw JSON value (which need not be a valid taint list), and deletes it after the test.
func setInferenceClusterTaints(t *testing.T, name, taintsJSON string) {
	t.Helper()
	var taints any
	require.NoError(t, json.Unmarshal([]byte(taintsJSON), &taints))
	res := dyn.Resource(model.InferenceClustersResource)
	_, err := res.Get(ctxFor(t), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"taints": taints},
		}}
		_, err = res.Create(ctxFor(t), u, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		return
	}
	require.NoError(t, err)
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": taints}})
	require.NoError(t, err)
	_, err = res.Patch(ctxFor(t), name, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}

// setWorkloadClusterTaints creates or updates the WorkloadCluster name with the taints
// annotation set to value (or removed), and deletes it after the test.
func setWorkloadClusterTaints(t *testing.T, name, value string, remove bool) {
	t.Helper()
	res := dyn.Resource(model.WorkloadClustersResource)
	_, err := res.Get(ctxFor(t), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "ome.io/v1beta1", "kind": "WorkloadCluster",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{},
		}}
		if !remove {
			u.SetAnnotations(map[string]string{weights.TaintsAnnotation: value})
		}
		_, err = res.Create(ctxFor(t), u, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		return
	}
	require.NoError(t, err)
	var v any = value
	if remove {
		v = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{weights.TaintsAnnotation: v}}})
	require.NoError(t, err)
	_, err = res.Patch(ctxFor(t), name, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}

// tolerate sets the service's tolerations annotation.
func (f *fixture) tolerate(value string) {
	f.setAnnotation(service, weights.TolerationsAnnotation, value, false)
}

// clusterEvents returns the Events recorded on a cluster-scoped object (they live in the
// default namespace).
func clusterEvents(t *testing.T, kind, name string) []corev1.Event {
	t.Helper()
	list, err := kube.CoreV1().Events(metav1.NamespaceDefault).List(ctxFor(t), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name,
	})
	require.NoError(t, err)
	return list.Items
}

// hasEvent reports whether events holds a Warning with this reason and a message containing
// contains.
func hasEvent(events []corev1.Event, reason, contains string) bool {
	for _, e := range events {
		if e.Reason == reason && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, contains) {
			return true
		}
	}
	return false
}

// A NoExecute taint on worker-a drains it for every service at once, while a service
// tolerating the taint keeps its weight there; removing the taint brings traffic back.
func TestFleetTaintDrainsEveryService(t *testing.T) {
	chat := newFixture(t)
	fl := newFleet(chat)
	other := newFixture(t)
	tolerant := newFixture(t)
	tolerant.tolerate(`[{"key":"maintenance","operator":"Exists"}]`)
	for _, f := range []*fixture{chat, other, tolerant} {
		f.createMap(fl.entries())
		f.startPublisher()
	}
	for _, f := range []*fixture{chat, other, tolerant} {
		f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
	}

	setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
	for _, f := range []*fixture{chat, other} {
		f.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + "), " + fl.b + "=1")
		assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 1}, fl.weights(f))
	}
	// The tolerant service has processed the same taint (its route records it) and kept its weight.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := tolerant.route()
		assert.Contains(c, r.Annotations[httproute.AnnotationClusterTaints], `"`+fl.a+`":[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`)
	}, waitTimeout, tick)
	tolerant.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
	assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 1}, fl.weights(tolerant))

	setInferenceClusterTaints(t, fl.a, `[]`)
	for _, f := range []*fixture{chat, other, tolerant} {
		f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
		assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 1}, fl.weights(f))
	}
}

// Each matching rule of the seed keeps the service's weight on the tainted cluster; a
// toleration that does not match drains it. Every rule is checked from a drained state, so
// each step really changes what is published.
func TestFleetTolerationRules(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap(fl.entries())
	f.startPublisher()
	setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
	drained := fl.a + "=0 (" + maintenanceTaint + "), " + fl.b + "=1"
	f.waitPublishedWith(drained)

	nonMatching := []struct{ name, tolerations string }{
		{"Equal with another value", `[{"key":"maintenance","operator":"Equal","value":"unplanned"}]`},
		{"Exists with another key", `[{"key":"upgrade","operator":"Exists"}]`},
		{"Exists with the other effect", `[{"key":"maintenance","operator":"Exists","effect":"NoSchedule"}]`},
	}
	matching := []struct{ name, tolerations string }{
		{"Exists ignores the value", `[{"key":"maintenance","operator":"Exists","effect":"NoExecute"}]`},
		{"Equal needs key and value", `[{"key":"maintenance","operator":"Equal","value":"planned","effect":"NoExecute"}]`},
		{"Equal is the default operator", `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`},
		{"empty key with Exists tolerates every taint", `[{"operator":"Exists"}]`},
		{"empty effect matches NoExecute", `[{"key":"maintenance","operator":"Exists"}]`},
	}
	for i, m := range matching {
		f.tolerate(m.tolerations)
		f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
		assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 1}, fl.weights(f), m.name)

		n := nonMatching[i%len(nonMatching)]
		f.tolerate(n.tolerations)
		f.waitPublishedWith(drained)
		assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 1}, fl.weights(f), n.name)
	}
}

// A NoSchedule taint changes no weight. A NoExecute taint on the other cluster, applied after
// it on the same informer, shows the publisher has seen the NoSchedule taint.
func TestFleetNoScheduleChangesNoWeight(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap(fl.entries())
	f.startPublisher()
	f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")

	setInferenceClusterTaints(t, fl.a, maintenanceNoSchedule)
	setInferenceClusterTaints(t, fl.b, maintenanceNoExecute)
	f.waitPublishedWith(fl.a + "=1, " + fl.b + "=0 (" + maintenanceTaint + ")")
	assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 0}, fl.weights(f))
	assert.Contains(t, f.route().Annotations[httproute.AnnotationClusterTaints], `"`+fl.a+`":[]`, "NoSchedule is not recorded: it moves nothing")
}

// A cluster both tainted and drained by annotation comes back only when both are removed.
func TestFleetTaintAndDrainBothHold(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap(fl.entries())
	f.startPublisher()
	f.waitPublished()
	drainA := `{"maintenance-a":{"cluster":"` + fl.a + `","reason":"planned maintenance"}}`

	setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
	f.drain(drainA)
	f.waitPublishedWith(fl.a + "=0 (drained by maintenance-a; " + maintenanceTaint + "), " + fl.b + "=1")

	setInferenceClusterTaints(t, fl.a, `[]`)
	f.waitPublishedWith(fl.a + "=0 (drained by maintenance-a), " + fl.b + "=1")
	assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 1}, fl.weights(f))

	setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
	f.waitPublishedWith(fl.a + "=0 (drained by maintenance-a; " + maintenanceTaint + ")")
	f.drain(`{}`)
	f.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + "), " + fl.b + "=1")
	assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 1}, fl.weights(f))

	setInferenceClusterTaints(t, fl.a, `[]`)
	f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
	assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 1}, fl.weights(f))
}

// Tainting every cluster of a service publishes all-zero weights, saying which taints hold
// each cluster.
func TestFleetTaintEveryCluster(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap(fl.entries())
	f.startPublisher()
	f.waitPublished()

	setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
	setWorkloadClusterTaints(t, fl.b, `[{"key":"decommission","effect":"NoExecute"}]`, false)
	tm := f.waitCondition(metav1.ConditionTrue, string(model.ReasonPublished), fl.a+"=0 ("+maintenanceTaint+"), "+fl.b+"=0 (taint decommission:NoExecute)",
		"every effective weight is 0, so no traffic is routed")
	assert.True(t, tm.Status.Published)
	assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 0}, fl.weights(f))
}

// Both sources work: InferenceCluster spec.taints and the WorkloadCluster annotation, also
// together on one cluster (the cluster comes back when neither holds it).
func TestFleetBothTaintSources(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap(fl.entries())
	f.startPublisher()
	f.waitPublished()

	setWorkloadClusterTaints(t, fl.a, maintenanceNoExecute, false)
	f.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + "), " + fl.b + "=1")
	assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 1}, fl.weights(f))

	setInferenceClusterTaints(t, fl.a, `[{"key":"upgrade","effect":"NoExecute"}]`)
	f.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + ",upgrade:NoExecute), " + fl.b + "=1")

	setWorkloadClusterTaints(t, fl.a, "", true)
	f.waitPublishedWith(fl.a + "=0 (taint upgrade:NoExecute), " + fl.b + "=1")

	setInferenceClusterTaints(t, fl.a, `null`)
	f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
	assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 1}, fl.weights(f))
}

// Malformed taints keep the last valid state, also across a publisher restart, with reason
// InvalidTaints on the map and a Warning Event on the offending object; malformed tolerations
// do the same with reason InvalidTolerations. PublicationFallback says which recorded input
// is used (LastValidTaintsRetained, LastValidTolerationsRetained) and turns False once the
// input is fixed.
func TestFleetMalformedKeepsLastValid(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap(fl.entries())
	pub := f.startPublisher()
	setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
	f.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + "), " + fl.b + "=1")

	setInferenceClusterTaints(t, fl.a, `[{"key":"maintenance","effect":"Sometimes"}]`)
	want := []string{
		"inferencecluster " + fl.a + ` spec.taints: taint [0] (key "maintenance"): effect "Sometimes" must be NoSchedule or NoExecute`,
		"keeping the last valid taints of cluster " + fl.a + " (maintenance=planned:NoExecute)",
		fl.a + "=0 (" + maintenanceTaint + "), " + fl.b + "=1",
	}
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidTaints), want...)
	f.waitFallback(metav1.ConditionTrue, model.FallbackLastValidTaints, want[0], want[1])
	assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 1}, fl.weights(f))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, hasEvent(clusterEvents(t, model.KindInferenceCluster, fl.a), string(model.ReasonInvalidTaints), `effect "Sometimes"`))
	}, waitTimeout, tick)

	// The last valid taints survive a restart: they are recorded on the route. A drain on the
	// other cluster shows the new publisher has computed the weights itself.
	pub.stop(t)
	f.startPublisher()
	f.drain(`{"probe-b":{"cluster":"` + fl.b + `","reason":"probe"}}`)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidTaints), want[0], want[1],
		fl.a+"=0 ("+maintenanceTaint+"), "+fl.b+"=0 (drained by probe-b)")
	assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 0}, fl.weights(f))
	f.drain(`{}`)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidTaints), want...)

	// The WorkloadCluster annotation is checked as strictly.
	setWorkloadClusterTaints(t, fl.b, `{"key":"x"}`, false)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidTaints),
		"workloadcluster "+fl.b+" annotation "+weights.TaintsAnnotation+": taint list must be a JSON array of objects, got object",
		"keeping the last valid taints of cluster "+fl.b+" (none)", want[0], want[2])
	assert.Equal(t, map[string]int32{fl.a: 0, fl.b: 1}, fl.weights(f))
	setWorkloadClusterTaints(t, fl.b, "", true)

	setInferenceClusterTaints(t, fl.a, `[]`)
	f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
	f.waitFallback(metav1.ConditionFalse, model.FallbackCurrentPlanApplied)

	// Tolerations: a valid list, then a malformed one, which keeps the valid one.
	setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
	f.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + "), " + fl.b + "=1")
	f.tolerate(`[{"key":"maintenance","operator":"Exists"}]`)
	f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
	f.tolerate(`[{"key":"maintenance","operator":"Exist"}]`)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidTolerations),
		`annotation `+weights.TolerationsAnnotation+`: toleration [0] (key "maintenance"): operator "Exist" must be Exists or Equal`,
		"keeping the last valid tolerations (maintenance:Exists)", fl.a+"=1, "+fl.b+"=1")
	f.waitFallback(metav1.ConditionTrue, model.FallbackLastValidTolerations,
		"inferenceservice "+f.ns+"/chat annotation "+weights.TolerationsAnnotation, "keeping the last valid tolerations (maintenance:Exists)")
	assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 1}, fl.weights(f))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := kube.CoreV1().Events(f.ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=InferenceService,involvedObject.name=" + service,
		})
		require.NoError(c, err)
		assert.True(c, hasEvent(list.Items, string(model.ReasonInvalidTolerations), `operator "Exist"`))
	}, waitTimeout, tick)

	f.tolerate(`[]`)
	f.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + "), " + fl.b + "=1")
	f.waitFallback(metav1.ConditionFalse, model.FallbackCurrentPlanApplied)
}

// Malformed taints before anything was published publish nothing: they are never read as
// "no taints".
func TestFleetMalformedTaintsBeforeFirstPublish(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	setInferenceClusterTaints(t, fl.a, `[{"key":"maintenance"}]`)
	f.createMap(fl.entries())
	f.startPublisher()
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidTaints),
		`field "effect" is required`, "cluster "+fl.a+": "+model.ErrNoTaintFallback.Error())
	f.waitFallback(metav1.ConditionUnknown, model.FallbackReason(model.ReasonInvalidTaints), "no plan can be made for trafficmap "+f.ns+"/chat")
	assert.Nil(t, f.route())

	setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
	f.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + "), " + fl.b + "=1")
}

// `publisher status --workload-cluster C` lists the services still sending traffic to C, and
// is empty once every service that does not tolerate C's NoExecute taint has left it (the
// fleet counterpart of Modelplane's "Confirm the drain").
func TestFleetStatusWorkloadClusterEmptiesAfterTaint(t *testing.T) {
	chat := newFixture(t)
	fl := newFleet(chat)
	tolerant := newFixture(t)
	tolerant.tolerate(`[{"key":"maintenance","operator":"Exists","effect":"NoExecute"}]`)
	for _, f := range []*fixture{chat, tolerant} {
		f.createMap(fl.entries())
		f.startPublisher()
		f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
	}
	op := admin(t)
	listed := func() []string {
		t.Helper()
		r := op.run(t, "status", "--workload-cluster", fl.a, "-A", "-o", "json")
		require.Equal(t, 0, r.code, r.stderr)
		var out struct {
			Services []struct{ Namespace, TrafficMap string }
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		var names []string
		for _, s := range out.Services {
			names = append(names, s.Namespace+"/"+s.TrafficMap)
		}
		return names
	}
	assert.ElementsMatch(t, []string{chat.ns + "/chat", tolerant.ns + "/chat"}, listed())

	setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
	chat.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + ")")
	assert.Equal(t, []string{tolerant.ns + "/chat"}, listed(), "only the tolerating service is still on the cluster")
	r := op.run(t, "status", "chat", "-n", tolerant.ns)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "maintenance:Exists:NoExecute", "status shows the tolerations in effect")
	r = op.run(t, "status", "chat", "-n", chat.ns)
	assert.Contains(t, r.stdout, "maintenance=planned:NoExecute", "status shows the taint holding the cluster")

	tolerant.tolerate(`[]`)
	tolerant.waitPublishedWith(fl.a + "=0 (" + maintenanceTaint + ")")
	assert.Empty(t, listed(), "every service has left the tainted cluster")
}

// Malformed tolerations written while no publisher leads, after the map went True (the
// chaos run's lost map: a True written just before the change, then the leader killed): the
// next publisher to lead, a fresh one or a follower taking over, finds them and turns the map
// False, keeping the last valid ones.
func TestFleetMalformedTolerationsFoundByTheNextLeader(t *testing.T) {
	le := func(f *fixture, id string) func(*publish.Config) {
		return func(c *publish.Config) {
			c.LeaderElection = publish.LeaderElection{Enabled: true, Namespace: f.ns, Name: haLease, Identity: id,
				LeaseDuration: haLeaseDuration, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}
		}
	}
	for _, follower := range []bool{false, true} {
		t.Run(map[bool]string{false: "a fresh publisher", true: "a follower taking over"}[follower], func(t *testing.T) {
			f := newFixture(t)
			fl := newFleet(f)
			f.createMap(fl.entries())
			a := startPublisherWith(t, f.publisherConfig(le(f, "a")), restCfg, zaptest.NewLogger(t).Named("a"))
			setInferenceClusterTaints(t, fl.a, maintenanceNoExecute)
			f.tolerate(`[{"key":"maintenance","operator":"Exists"}]`)
			f.waitPublishedWith(fl.a + "=1, " + fl.b + "=1")
			next := "a"
			if follower {
				startPublisherWith(t, f.publisherConfig(le(f, "b")), restCfg, zaptest.NewLogger(t).Named("b"))
				next = "b"
			}
			a.stop(t)
			f.tolerate(`[{"key":""}]`)
			if !follower {
				startPublisherWith(t, f.publisherConfig(le(f, "a")), restCfg, zaptest.NewLogger(t).Named("a again"))
			}
			f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidTolerations),
				"toleration [0]: an empty key needs operator Exists", "keeping the last valid tolerations (maintenance:Exists)", fl.a+"=1, "+fl.b+"=1")
			require.Equal(t, next, leaseHolder(t, f.ns))
		})
	}
}
