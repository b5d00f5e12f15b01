package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// S6: a malformed annotation keeps the last valid drains, sets Published False with the
// parser's error and records an Event; still so after a publisher restart.
func TestMalformedDrainKeepsLastValidDrains(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher()
	f.waitPublished()
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a)")

	f.drain(`{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance","until":"friday"}}`)
	parserErr := `override "maintenance-a" has unknown field "until"`
	tm := f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidDrainAnnotation), parserErr, "keeping the last valid drains (maintenance-a on worker-a)")
	assert.False(t, tm.Status.Published)
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var reasons []string
		for _, e := range f.events() {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, parserErr) {
				reasons = append(reasons, e.Reason)
			}
		}
		assert.Contains(c, reasons, string(model.ReasonInvalidDrainAnnotation))
	}, waitTimeout, tick)

	// Spec changes still flow, with the last valid drains applied.
	f.updateMap(func(s *v1beta1.TrafficMapSpec) { s.Entries[1].Weight = 2 })
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidDrainAnnotation), parserErr, "worker-b=2")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 2}, f.routeWeights("worker-a", "worker-b"))

	// A new publisher process knows the last valid drains from what is stored.
	pub.stop(t)
	f.updateMap(func(s *v1beta1.TrafficMapSpec) { s.Entries[1].Weight = 3 })
	f.startPublisher()
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidDrainAnnotation), parserErr, "worker-a=0 (drained by maintenance-a), worker-b=3")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 3}, f.routeWeights("worker-a", "worker-b"))

	f.drain(`{}`)
	f.waitPublishedWith("worker-a=1, worker-b=3")
}

// S7: an invalid TrafficMap leaves the published route untouched and names the entry and
// the rule.
func TestInvalidTrafficMapLeavesRoute(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	okGen := f.waitPublished().Generation
	before := f.route()

	f.updateMap(func(s *v1beta1.TrafficMapSpec) { s.Entries[1].Endpoint = "ftp://chat.worker-b.example.com" })
	tm := f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidTrafficMap),
		`spec.entries[1] (cluster "worker-b")`, `endpoint "ftp://chat.worker-b.example.com"`, "must be an absolute http or https URL",
		"the published route is left as it was")
	assert.False(t, tm.Status.Published)
	assert.Equal(t, okGen, tm.Status.ObservedTrafficMapGeneration, "observedTrafficMapGeneration keeps the last success")
	assert.Equal(t, okGen+1, tm.Generation)
	after := f.route()
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "route untouched")

	f.updateMap(func(s *v1beta1.TrafficMapSpec) { s.Entries[1].Endpoint = "https://chat.worker-b.example.com:8443" })
	f.waitPublished()
	var ports []int32
	for _, s := range f.ownedServices() {
		ports = append(ports, s.Spec.Ports[0].Port)
	}
	assert.ElementsMatch(t, []int32{443, 8443}, ports)
}

// S8: the routing controller's conditions and the publisher's never remove or change each
// other.
func TestSharedStatusOwnership(t *testing.T) {
	f := newFixture(t)
	uid := f.isvcUID
	f.createMap(seedEntries())
	routable := metav1.Condition{Status: metav1.ConditionTrue, Reason: "Routable", Message: "2 home(s) serving"}
	noOverride := metav1.Condition{Status: metav1.ConditionFalse, Reason: "NoOverrides", Message: "no traffic-drain annotation override is configured"}
	_, err := f.routing.ApplyStatus(ctxFor(t), f.ns, service, uid, routable, noOverride)
	require.NoError(t, err)
	f.startPublisher()
	tm := f.waitPublished()
	requireRouting(t, tm, uid, "Routable", "NoOverrides")

	// The routing controller applies the drain and its conditions; Published is untouched by
	// that write and then moves on its own.
	f.drain(seedDrain)
	_, err = f.routing.ApplyDrain(ctxFor(t), f.ns, service, "worker-a", "maintenance-a")
	require.NoError(t, err)
	applied := metav1.Condition{Status: metav1.ConditionTrue, Reason: "OverridesApplied",
		Message: "1 of 1 traffic-drain annotation override(s) active across 1 route arm(s); inspect spec.entries[].drainRefs"}
	tm, err = f.routing.ApplyStatus(ctxFor(t), f.ns, service, uid, routable, applied)
	require.NoError(t, err)
	require.NotNil(t, published(tm), "the routing controller's apply kept Published")

	tm = f.waitPublishedWith("worker-a=0 (drained by maintenance-a)")
	requireRouting(t, tm, uid, "Routable", "OverridesApplied")
	for _, mf := range tm.ManagedFields {
		if mf.Subresource == "status" && mf.Manager == publish.DefaultFieldManager {
			assert.NotContains(t, mf.FieldsV1.GetRawString(), "sourceUID", "the publisher never owns sourceUID")
			assert.NotContains(t, mf.FieldsV1.GetRawString(), `"k:{\"type\":\"Routable\"}"`)
		}
	}
}

func requireRouting(t *testing.T, tm *v1beta1.TrafficMap, uid any, routableReason, overrideReason string) {
	t.Helper()
	assert.EqualValues(t, uid, tm.Status.SourceUID)
	r := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionRoutable)
	o := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionOverrideActive)
	require.NotNil(t, r)
	require.NotNil(t, o)
	assert.Equal(t, routableReason, r.Reason)
	assert.Equal(t, overrideReason, o.Reason)
}

// S9: deleting a TrafficMap removes its route and Services, also when the publisher was
// stopped during the deletion.
func TestDeleteRemovesEverything(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher()
	f.waitPublished()
	require.Len(t, f.ownedServices(), 2)

	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	f.waitGone()
	f.waitMapGone() // the finalizer goes last

	// Again, with the publisher down during the deletion: the finalizer holds the map.
	f.createMap(seedEntries())
	f.waitPublished()
	pub.stop(t)
	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	require.NotNil(t, f.route(), "nothing removes the route while the publisher is down")
	f.requireHeld("the finalizer holds the map while the publisher is down")
	f.startPublisher()
	f.waitGone()
	f.waitMapGone()
}

func (f *fixture) waitGone() {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		_, err := gw.GatewayV1().HTTPRoutes(f.ns).Get(context.Background(), httproute.RouteName(service), metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "route gone")
		assert.Empty(c, f.ownedServices(), "services gone")
	}, waitTimeout, tick)
}

// S10: an HTTPRoute at the publisher's route name that it does not own is left untouched and
// Published names it.
func TestForeignRouteIsNotOverwritten(t *testing.T) {
	f := newFixture(t)
	foreign, err := gw.GatewayV1().HTTPRoutes(f.ns).Create(ctxFor(t), &gwapiv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: httproute.RouteName(service), Namespace: f.ns, Labels: map[string]string{"team": "web"}},
		Spec: gwapiv1.HTTPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: []gwapiv1.ParentReference{{Name: "other"}}},
			Hostnames:       []gwapiv1.Hostname{"www.example.com"},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	f.createMap(seedEntries())
	f.startPublisher()

	tm := f.waitCondition(metav1.ConditionFalse, string(model.ReasonRouteConflict),
		"httproute "+f.ns+"/chat-global exists and is not owned by the publisher", "refusing to overwrite it")
	assert.False(t, tm.Status.Published)
	after := f.route()
	assert.Equal(t, foreign.ResourceVersion, after.ResourceVersion, "foreign route untouched")

	// Once the owner removes it, the publisher takes the name.
	require.NoError(t, gw.GatewayV1().HTTPRoutes(f.ns).Delete(ctxFor(t), foreign.Name, metav1.DeleteOptions{}))
	f.waitPublished()
}

// S11: the API server stops and starts again (same etcd) while the publisher runs: it
// recovers on its own and converges, losing no update.
func TestAPIServerRestart(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()

	f.drain(seedDrain) // written just before the outage: must not be lost
	api := env.ControlPlane.GetAPIServer()
	if err := api.Stop(); err != nil {
		// Open watches hold graceful shutdown past StopTimeout; envtest then SIGKILLs it,
		// which is the harsher outage.
		require.ErrorContains(t, err, "timeout waiting for process kube-apiserver to stop")
	}
	_, err := kube.CoreV1().Namespaces().Get(ctxFor(t), f.ns, metav1.GetOptions{})
	require.Error(t, err, "the api server is down")
	require.NoError(t, api.Start())

	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	f.updateMap(func(s *v1beta1.TrafficMapSpec) { s.Entries[1].Weight = 5 })
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=5")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 5}, f.routeWeights("worker-a", "worker-b"))
}

// S12: after a spec change a watcher sees Published False at the new generation before True,
// and kubectl shows the PUBLISHED column.
func TestPublishedFlipsBeforeTrueAndKubectlColumn(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()

	w := f.watchPublished()
	tm := f.updateMap(func(s *v1beta1.TrafficMapSpec) { s.Entries[0].Weight = 3 })
	f.waitPublishedWith("worker-a=3, worker-b=1")
	requireFalseBeforeTrue(t, w, tm.Generation)

	kubectl, err := exec.LookPath("kubectl")
	require.NoError(t, err, "kubectl (Debian package kubectl) must be on PATH")
	user, err := env.AddUser(envtest.User{Name: "columns", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kubeconfig, err := user.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, kubeconfig, 0o600))
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kubectl, "--kubeconfig", path, "get", "trafficmap", service, "-n", f.ns)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 2, stdout.String())
	assert.Equal(t, []string{"NAME", "MODE", "PUBLISHED", "ROUTABLE", "OVERRIDE", "REASON", "AGE"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"chat", "All", "True"}, strings.Fields(lines[1])[:3])
}

// S6, first publish: with no route yet there is no last valid drain set, so a malformed
// annotation publishes nothing rather than reading the drain as absent.
func TestMalformedDrainBeforeFirstPublish(t *testing.T) {
	f := newFixture(t)
	f.drain(`{"maintenance-a":{"cluster":"worker-a"}}`)
	f.createMap(seedEntries())
	f.startPublisher()

	tm := f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidDrainAnnotation),
		`override "maintenance-a" reason must be non-empty`, "nothing is published")
	assert.False(t, tm.Status.Published)
	assert.Nil(t, f.route(), "no route published")
	assert.Empty(t, f.ownedServices())

	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
}
