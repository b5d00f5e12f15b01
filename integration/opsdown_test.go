package integration

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// Exit codes the operator commands document.
const (
	exitWaitTimeout  = 4
	exitNotPublished = 5
)

// statusManagers are the field managers of the map's status subresource.
func statusManagers(tm *v1beta1.TrafficMap) []string {
	var out []string
	for _, m := range tm.ManagedFields {
		if m.Subresource == "status" {
			out = append(out, m.Manager)
		}
	}
	return out
}

// With the publisher stopped, a drain made with the tool flips PUBLISHED to False at once,
// under the publisher's field manager and with the publisher's other status fields kept; a
// dry run writes nothing; status --check fails while the route holds other weights;
// --wait times out with its exit code while no publisher runs, and returns 0 once a
// publisher has started and moved the traffic.
func TestOpsPublisherDown(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher()
	before := f.waitPublished()
	op := admin(t)
	check := func() ran { return op.run(t, "status", "chat", "-n", f.ns, "--check") }
	got := check()
	require.Equal(t, 0, got.code, got.stderr)
	pub.stop(t)

	// A server dry run writes neither the annotation nor the status.
	got = op.run(t, seedDrainArgs(f.ns, "--yes", "--dry-run=server")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, before.ResourceVersion, f.getMap().ResourceVersion, "a dry run writes no status")
	got = op.run(t, seedDrainArgs(f.ns, "--yes", "--dry-run=server", "--wait")...)
	assert.Equal(t, 1, got.code)
	assert.Equal(t, "error: --wait waits for an applied change; a dry run applies none\n", got.stderr)

	// The drain, no publisher running: Published is False as soon as the command returns.
	got = op.run(t, seedDrainArgs(f.ns, "--yes")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.NotContains(t, got.stderr, "warning")
	assert.Equal(t, map[string]string{drainKey: seedDrain}, f.isvc(service).GetAnnotations())
	tm := f.getMap()
	cond := published(tm)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, string(model.ReasonPublishing), cond.Reason)
	assert.Equal(t, "publisher drain of maintenance-a on worker-a requested; not yet published", cond.Message)
	assert.Equal(t, tm.Generation, cond.ObservedGeneration)
	assert.False(t, tm.Status.Published)
	assert.Equal(t, before.Status.ObservedTrafficMapGeneration, tm.Status.ObservedTrafficMapGeneration, "kept")
	assert.Equal(t, before.Status.GatewayRef, tm.Status.GatewayRef, "kept")
	require.NotNil(t, model.FindFallback(before))
	assert.Equal(t, model.FindFallback(before), model.FindFallback(tm), "PublicationFallback kept: the flip moves no sink")
	assert.Subset(t, []string{publish.DefaultFieldManager, v1beta1.RoutingFieldManager}, statusManagers(tm),
		"written as the publisher writes it, under its field manager")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"), "nothing published it")

	got = check()
	assert.Equal(t, exitNotPublished, got.code, got.stderr)
	assert.Contains(t, got.stdout, "Published                  False (Publishing), Current")
	assert.Equal(t, "error: not published: published is False (Publishing): publisher drain of maintenance-a on worker-a requested; not yet published\n", got.stderr)

	// --wait with no publisher: the undrain applies, and the wait ends with its exit code.
	got = op.run(t, undrainArgs(f.ns, "--yes", "--wait=1s")...)
	assert.Equal(t, exitWaitTimeout, got.code, got.stderr)
	assert.Contains(t, got.stderr, "\nerror: timed out waiting for the publisher after 1s: ")
	assert.NotContains(t, f.isvc(service).GetAnnotations(), drainKey, "the undrain applied")
	assert.Equal(t, "publisher undrain of maintenance-a on worker-a stored; not yet published", published(f.getMap()).Message,
		"--wait flips Published again once the patch is stored: its baseline")

	// --wait while a publisher starts: it returns 0 once the route holds the drained weights.
	wait := op.start(t, seedDrainArgs(f.ns, "--yes", "--wait=1m")...)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, seedDrain, f.isvc(service).GetAnnotations()[drainKey])
	}, waitTimeout, tick, "the drain is applied before any publisher runs")
	f.startPublisher()
	got = wait()
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stderr, "\nPublished: ")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"), "traffic moved when --wait returned")
	cond = published(f.getMap())
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	got = check()
	assert.Equal(t, 0, got.code, got.stderr)

	// With the publisher running, --wait returns once the undrain is published.
	got = op.run(t, undrainArgs(f.ns, "--yes", "--wait=1m")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"), "traffic moved back when --wait returned")
	assert.Equal(t, metav1.ConditionTrue, published(f.getMap()).Status)
	got = op.run(t, seedDrainArgs(f.ns, "--yes", "--wait=1m")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))

	// A hand edit of the annotation while no publisher runs: PUBLISHED stays True (the
	// generation did not move), and status --check tells the route holds other weights.
	f.pub.stop(t)
	f.setAnnotation(service, drainKey, "", true)
	got = check()
	assert.Equal(t, exitNotPublished, got.code, got.stderr)
	assert.Equal(t, fmt.Sprintf("error: not published: route %s/chat-global holds worker-a=0, worker-b=1, the inputs give worker-a=1, worker-b=1\n", f.ns), got.stderr)
}

// A user who may drain but not write TrafficMap status: the drain applies, and a warning
// says why PUBLISHED was not set.
func TestOpsDrainWithoutStatusPermission(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher()
	before := f.waitPublished()
	pub.stop(t)
	drainer := newOpsUser(t, "drainer")
	f.bindRole("drainer",
		rbacv1.PolicyRule{APIGroups: []string{"ome.io"}, Resources: []string{"inferenceservices"}, Verbs: []string{"get", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"ome.io"}, Resources: []string{"trafficmaps"}, Verbs: []string{"get"}})
	f.bindStatusReader("drainer") // what the last-serving guard reads

	got := drainer.run(t, seedDrainArgs(f.ns, "--yes")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stderr, fmt.Sprintf("\nwarning: Published not set to False: forbidden: cannot patch trafficmaps.ome.io/status in namespace %s; "+
		"PUBLISHED may show the state before this drain until the publisher publishes it (setting it needs patch on trafficmaps.ome.io/status)\n", f.ns))
	assert.Equal(t, map[string]string{drainKey: seedDrain}, f.isvc(service).GetAnnotations(), "the drain applied")
	assert.Equal(t, before.ResourceVersion, f.getMap().ResourceVersion, "the status was not written")
}
