package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/drain"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/report"
	"github.com/trafficmap/publisher/weights"
)

// drainKey is the annotation the drain commands write. The prompt's tests, which need a
// pseudo-terminal, are in integration/tty, a module of their own.
const drainKey = "ome.io/traffic-drain"

func seedDrainArgs(ns string, extra ...string) []string {
	return append([]string{"drain", "chat", "-n", ns, "--workload-cluster", "worker-a", "--id", "maintenance-a", "--reason", "planned maintenance"}, extra...)
}

func undrainArgs(ns string, extra ...string) []string {
	return append([]string{"undrain", "chat", "-n", ns, "--id", "maintenance-a"}, extra...)
}

// wantPreview is the seed's preview for the fixture's chat as read (uid, resourceVersion),
// with the effective weights of the drain (worker-a 1 -> 0) or the undrain (0 -> 1) of
// worker-a.
func (f *fixture) wantPreview(action, rv, cluster, reason, count string) string {
	return fmt.Sprintf(`ALPHA guarded traffic action (not TrafficMap convergence)
FIELD             VALUE
Action            traffic %s
Context           envtest
Workload NS       %s
Target            InferenceService/chat
UID               %s
ResourceVersion   %s
Dry-run           none
Override ID       maintenance-a
Cluster           %s
Reason            %s
Override count    %s
Annotation        ome.io/traffic-drain
Follow-up         publisher status chat -n %s --context=envtest
API acceptance is not TrafficMap convergence or data-plane realization.
The exact InferenceService UID/resourceVersion is tested atomically.
Other annotations and traffic-drain override IDs are preserved.
Run the previewed traffic status command to observe controller evidence.
Effective weights of InferenceService %s/chat (TrafficMap chat):
  CLUSTER    WEIGHT   BEFORE   AFTER
  worker-a   1        %s        %s
  worker-b   1        1        1
`, action, f.ns, f.isvcUID, rv, cluster, reason, count, f.ns, f.ns, map[string]string{"drain": "1", "undrain": "0"}[action], map[string]string{"drain": "0", "undrain": "1"}[action])
}

func (f *fixture) wantResult(action, count, dryRun, applied, message string) string {
	return fmt.Sprintf(`FIELD         VALUE
action        traffic %s
target        InferenceService/%s/chat
dry-run       %s
accepted      Yes
applied       %s
override-id   maintenance-a
cluster       worker-a
overrides     %s
message       %s
follow-up     publisher status chat -n %s --context=envtest
hint          Use -o json or -o yaml for full values.
`, action, f.ns, dryRun, applied, count, message, f.ns)
}

const acceptedMessage = "API accepted traffic annotation request; not TrafficM..."

// The seed's drain and undrain with --yes, on the real API server with the publisher
// running: the output has the seed's shape, the annotation is exactly the seed's, and the
// publisher moves the route.
func TestOpsSeedDrainAndUndrainWithYes(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()
	op := admin(t)
	require.Nil(t, f.isvc(service).GetAnnotations(), "the seed's service starts with no annotations (the patch adds {} first)")

	rv := f.isvc(service).GetResourceVersion()
	got := op.run(t, seedDrainArgs(f.ns, "--yes")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, f.wantPreview("drain", rv, "worker-a", `"planned maintenance"`, "0 -> 1"), got.stderr)
	assert.Equal(t, f.wantResult("drain", "0 -> 1", "none", "Yes", acceptedMessage), got.stdout)
	assert.Equal(t, map[string]string{drainKey: seedDrain}, f.isvc(service).GetAnnotations())
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))

	// Undrain, with another annotation present, which stays.
	f.setAnnotation(service, "team", "serving", false)
	rv = f.isvc(service).GetResourceVersion()
	got = op.run(t, undrainArgs(f.ns, "--yes")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, f.wantPreview("undrain", rv, "worker-a", "<absent>", "1 -> 0"), got.stderr)
	assert.Equal(t, f.wantResult("undrain", "1 -> 0", "none", "Yes", acceptedMessage), got.stdout)
	assert.Equal(t, map[string]string{"team": "serving"}, f.isvc(service).GetAnnotations(), "the key is removed, nothing else")
	f.waitPublishedWith("worker-a=1, worker-b=1")

	// -o json: the ActionResult, with the stored resourceVersion.
	got = op.run(t, seedDrainArgs(f.ns, "--yes", "-o", "json")...)
	require.Equal(t, 0, got.code, got.stderr)
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(got.stdout), &res))
	assert.Equal(t, "ActionResult", res["kind"])
	assert.Equal(t, f.isvc(service).GetResourceVersion(), res["target"].(map[string]any)["resourceVersion"])
	assert.Equal(t, map[string]any{"overrideID": "maintenance-a", "cluster": "worker-a", "overridesBefore": float64(0), "overridesAfter": float64(1)}, res["traffic"])
}

// --dry-run=server goes through the API server and stores nothing; --dry-run=client sends no
// patch at all, shown by a user who may get but not patch: the client dry run succeeds, the
// server dry run is refused by RBAC.
func TestOpsDryRun(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	op := admin(t)
	rv := f.isvc(service).GetResourceVersion()

	got := op.run(t, seedDrainArgs(f.ns, "--yes", "--dry-run=server")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, f.wantResult("drain", "0 -> 1", "server", "No", "API dry-run accepted; no changes persisted."), got.stdout)
	assert.Contains(t, got.stderr, "Dry-run           server\n")
	assert.Equal(t, rv, f.isvc(service).GetResourceVersion())
	assert.Nil(t, f.isvc(service).GetAnnotations())

	got = op.run(t, seedDrainArgs(f.ns, "--yes", "--dry-run=client")...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, f.wantResult("drain", "0 -> 1", "client", "No", "Validated locally; no patch sent. TrafficMap converge..."), got.stdout)
	assert.Equal(t, rv, f.isvc(service).GetResourceVersion())

	reader := newOpsUser(t, "dry-reader")
	f.bindRole("dry-reader", rbacv1.PolicyRule{APIGroups: []string{"ome.io"}, Resources: []string{"inferenceservices", "trafficmaps"}, Verbs: []string{"get"}})
	got = reader.run(t, seedDrainArgs(f.ns, "--yes", "--dry-run=client")...)
	assert.Equal(t, 1, got.code, "the last-serving guard reads what status reads")
	assert.Contains(t, got.stderr, "error: the last-serving guard cannot read the service's weights: forbidden: cannot get httproutes.gateway.networking.k8s.io")
	f.bindStatusReader("dry-reader")
	got = reader.run(t, seedDrainArgs(f.ns, "--yes", "--dry-run=client")...)
	require.Equal(t, 0, got.code, "a client dry run needs no patch permission: %s", got.stderr)
	got = reader.run(t, seedDrainArgs(f.ns, "--yes", "--dry-run=server")...)
	assert.Equal(t, 1, got.code)
	assert.Contains(t, got.stderr, "error: forbidden: cannot patch inferenceservices.ome.io")
	assert.Equal(t, rv, f.isvc(service).GetResourceVersion())
}

// The guard against the real API server, case by case: the patch's resourceVersion and UID
// are enforced by kube-apiserver itself and each refusal is drain.ErrConflict, read from the
// API status alone; server dry runs are refused the same way; a fresh read applies.
func TestOpsGuardedPatchConflicts(t *testing.T) {
	f := newFixture(t)
	c := drain.Client{Dynamic: dyn, Action: drain.ActionDrain}
	req := drain.Request{Action: drain.ActionDrain, ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"}
	plan := func() *drain.Plan {
		t.Helper()
		tg, err := c.Get(ctxFor(t), f.ns, service)
		require.NoError(t, err)
		p, err := drain.Prepare(req, tg)
		require.NoError(t, err)
		return p
	}
	apply := func(p *drain.Plan, dry drain.DryRun) error {
		_, err := c.Apply(ctxFor(t), p, dry)
		return err
	}

	// Stale resourceVersion: 409 Conflict.
	stale := plan()
	f.setAnnotation(service, "unrelated", "bump", false)
	rv := f.isvc(service).GetResourceVersion()
	assert.ErrorIs(t, apply(stale, drain.DryRunServer), drain.ErrConflict)
	assert.ErrorIs(t, apply(stale, drain.DryRunNone), drain.ErrConflict)
	assert.Equal(t, rv, f.isvc(service).GetResourceVersion(), "nothing written")

	// The current resourceVersion with another UID (what a re-created object at the read
	// resourceVersion would be): 422 Invalid on metadata.uid.
	forged := plan()
	forged.Target.UID = "00000000-0000-4000-8000-000000000000"
	assert.ErrorIs(t, apply(forged, drain.DryRunNone), drain.ErrConflict)
	assert.Equal(t, rv, f.isvc(service).GetResourceVersion(), "nothing written")

	// Deleted and re-created after the read: another UID and a newer resourceVersion.
	old := plan()
	require.NoError(t, dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	uid := f.createISVC(service, nil)
	assert.ErrorIs(t, apply(old, drain.DryRunNone), drain.ErrConflict)
	assert.Nil(t, f.isvc(service).GetAnnotations(), "the new object is not touched")

	// A fresh read applies: the drain and nothing else, at the returned resourceVersion.
	fresh := plan()
	stored, err := c.Apply(ctxFor(t), fresh, drain.DryRunNone)
	require.NoError(t, err)
	u := f.isvc(service)
	assert.Equal(t, stored, u.GetResourceVersion())
	assert.Equal(t, uid, u.GetUID())
	assert.Equal(t, map[string]string{drainKey: seedDrain}, u.GetAnnotations())

	// And the undrain of it removes the key, with the other annotations kept.
	f.setAnnotation(service, "team", "serving", false)
	tg, err := c.Get(ctxFor(t), f.ns, service)
	require.NoError(t, err)
	undrain, err := drain.Prepare(drain.Request{Action: drain.ActionUndrain, ID: "maintenance-a"}, tg)
	require.NoError(t, err)
	require.NoError(t, apply(undrain, drain.DryRunNone))
	assert.Equal(t, map[string]string{"team": "serving"}, f.isvc(service).GetAnnotations())
}

// Every refusal: its exact message, exit code 1, and the InferenceService untouched.
func TestOpsRefusals(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.createRawISVC("plain", nil, map[string]any{})
	f.createRawISVC("copy", map[string]string{"ome.io/placement-origin": "hub"}, map[string]any{"placement": map[string]any{"mode": "All"}})
	op := admin(t)

	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf(`"d%02d":{"cluster":"worker-a","reason":"r"}`, i)
	}
	for _, tc := range []struct {
		name       string
		annotation string // the drain annotation to start from; "" for none
		args       []string
		want       string
		preview    bool // the refusal comes after the preview
	}{
		{"--cluster instead of --workload-cluster", "", []string{"drain", "chat", "-n", f.ns, "--cluster", "worker-a", "--id", "maintenance-a", "--reason", "planned maintenance", "--yes"},
			"traffic drain requires --workload-cluster; --cluster selects the Kubernetes API cluster", false},
		{"id already exists", seedDrain, seedDrainArgs(f.ns, "--yes"), "traffic drain refused: override ID already exists", false},
		{"undrain of a missing id", "", undrainArgs(f.ns, "--yes"), "traffic undrain refused: override ID does not exist", false},
		{"undrain of an unknown id", seedDrain, []string{"undrain", "chat", "-n", f.ns, "--id", "other", "--yes"}, "traffic undrain refused: override ID does not exist", false},
		{"malformed annotation", `{"maintenance-a":{"cluster":"worker-a"}}`, []string{"drain", "chat", "-n", f.ns, "--workload-cluster", "worker-b", "--id", "b", "--reason", "r", "--yes"},
			"traffic action refused: existing traffic-drain annotation is malformed or unsafe", false},
		{"unsafe existing entry", `{"Bad_ID":{"cluster":"worker-a","reason":"r"}}`, undrainArgs(f.ns, "--yes"),
			"traffic action refused: existing traffic-drain annotation is malformed or unsafe", false},
		{"too many drains", "{" + strings.Join(many, ",") + "}", undrainArgs(f.ns, "--yes"), "traffic action refused: traffic-drain state exceeds safety bounds", false},
		{"no --yes without a terminal", "", seedDrainArgs(f.ns), "action not confirmed; noninteractive input requires --yes", true},
		{"not eligible", "", []string{"drain", "plain", "-n", f.ns, "--workload-cluster", "worker-a", "--id", "m", "--reason", "r", "--yes"},
			"traffic action refused: target is not eligible for cross-cluster traffic routing", false},
		{"derived copy", "", []string{"drain", "copy", "-n", f.ns, "--workload-cluster", "worker-a", "--id", "m", "--reason", "r", "--yes"},
			"action refused: placement sources and derived services cannot be mutated", false},
		{"no such service", "", []string{"drain", "nope", "-n", f.ns, "--workload-cluster", "worker-a", "--id", "m", "--reason", "r", "--yes"},
			"required Kubernetes API request failed; check access and connectivity", false},
		{"invalid id", "", []string{"drain", "chat", "-n", f.ns, "--workload-cluster", "worker-a", "--id", "Maint", "--reason", "r", "--yes"},
			"traffic override ID must be a DNS-1123 label", false},
		{"secret reason", "", []string{"drain", "chat", "-n", f.ns, "--workload-cluster", "worker-a", "--id", "m", "--reason", "sk-abcdefghijklmnopqrstuvwxyz", "--yes"},
			"traffic drain reason must be bounded, trimmed, printable, and non-secret", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.annotation == "" {
				f.setAnnotation(service, drainKey, "", true)
			} else {
				f.drain(tc.annotation)
			}
			before := f.isvc(service)
			got := op.run(t, tc.args...)
			assert.Equal(t, 1, got.code)
			assert.Empty(t, got.stdout)
			if tc.preview {
				assert.True(t, strings.HasPrefix(got.stderr, "ALPHA guarded traffic action"), got.stderr)
				assert.True(t, strings.HasSuffix(got.stderr, "\nerror: "+tc.want+"\n"), got.stderr)
			} else {
				assert.Equal(t, "error: "+tc.want+"\n", got.stderr, "refused before any preview")
			}
			after := f.isvc(service)
			assert.Equal(t, before.GetResourceVersion(), after.GetResourceVersion(), "nothing written")
			assert.Equal(t, before.GetAnnotations(), after.GetAnnotations())
		})
	}
}

// A user whose Role lacks patch gets an error naming the verb, the resource and what the
// command needs; one without get learns the same about get.
func TestOpsPermissionErrors(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	viewer := newOpsUser(t, "viewer")
	f.bindRole("viewer", rbacv1.PolicyRule{APIGroups: []string{"ome.io"}, Resources: []string{"inferenceservices", "trafficmaps"}, Verbs: []string{"get", "list"}})
	f.bindStatusReader("viewer")
	rv := f.isvc(service).GetResourceVersion()

	got := viewer.run(t, seedDrainArgs(f.ns, "--yes")...)
	assert.Equal(t, 1, got.code)
	assert.True(t, strings.HasSuffix(got.stderr, fmt.Sprintf("\nerror: forbidden: cannot patch inferenceservices.ome.io in namespace %s; "+
		"the drain needs get and patch on inferenceservices.ome.io and get on trafficmaps.ome.io\n", f.ns)), got.stderr)
	assert.Equal(t, rv, f.isvc(service).GetResourceVersion())

	stranger := newOpsUser(t, "stranger")
	got = stranger.run(t, undrainArgs(f.ns, "--yes")...)
	assert.Equal(t, 1, got.code)
	assert.Equal(t, fmt.Sprintf("error: forbidden: cannot get inferenceservices.ome.io in namespace %s; "+
		"the undrain needs get and patch on inferenceservices.ome.io and get on trafficmaps.ome.io\n", f.ns), got.stderr)

	got = stranger.run(t, "status", "chat", "-n", f.ns)
	assert.Equal(t, 1, got.code)
	assert.Equal(t, fmt.Sprintf("error: forbidden: cannot get trafficmaps.ome.io in namespace %s; %s\n", f.ns, report.Needs), got.stderr)
}

// status, run against what the running publisher published for the same inputs: drained,
// pending and effective weights agree with the route and the Published condition, also for a
// malformed annotation, where status shows the parser's error and the drains the publisher
// keeps.
func TestOpsStatusMatchesPublisher(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()
	op := admin(t)

	got := op.run(t, seedDrainArgs(f.ns, "--yes")...)
	require.Equal(t, 0, got.code, got.stderr)
	got = op.run(t, "drain", "chat", "-n", f.ns, "--workload-cluster", "worker-c", "--id", "typo", "--reason", "wrong cluster", "--yes")
	require.Equal(t, 0, got.code, got.stderr)
	tm := f.waitCondition("True", "Published", "worker-a=0 (drained by maintenance-a), worker-b=1", "pending drains (no such entry): typo on worker-c")

	st := op.status(t, f.ns)
	routeWeights := f.routeWeights("worker-a", "worker-b")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, routeWeights)
	assert.Equal(t, routeWeights, effective(st), "status computes what the publisher published")
	assert.Equal(t, []report.Hold{{ID: "maintenance-a", Reason: "planned maintenance", Source: "annotation"}}, st.Clusters[0].HeldBy)
	assert.Equal(t, []report.Drain{{ID: "typo", Cluster: "worker-c", Reason: "wrong cluster"}}, st.Pending)
	assert.Equal(t, report.AnnotationValid, st.Drains.State)
	assert.Equal(t, "True", st.Published.Status)
	assert.Equal(t, report.Current, st.Published.Freshness)
	assert.Equal(t, tm.Generation, st.Published.ObservedGeneration)
	r := st.Sinks.HTTPRoute
	assert.True(t, r.Found && r.Owned && r.MatchesComputed, "%+v", r)
	assert.Equal(t, f.ns+"/global", r.Gateway)
	assert.Equal(t, report.VerdictAccepted, r.Verdict)
	assert.Equal(t, f.route().Generation, r.Generation)
	assert.Equal(t, report.XDSSink{Clients: []report.XDSClient{}}, st.Sinks.XDS, "not read without --publisher-url")

	asYAML := op.run(t, "status", "chat", "-n", f.ns, "-o", "yaml")
	require.Equal(t, 0, asYAML.code, asYAML.stderr)
	var fromYAML report.Status
	require.NoError(t, yaml.Unmarshal([]byte(asYAML.stdout), &fromYAML))
	assert.Equal(t, st, fromYAML)

	table := op.run(t, "status", "chat", "-n", f.ns)
	require.Equal(t, 0, table.code, table.stderr)
	for _, want := range []string{
		`worker-a   1        0           maintenance-a "planned maintenance"`,
		"worker-b   1        1           -",
		`typo   worker-c   "wrong cluster"`,
		"Published                  True (Published), Current",
		fmt.Sprintf("Gateway                    %s/global: Accepted at route generation %d", f.ns, r.Generation),
		"xDS sink                   " + report.XDSUnavailable + "\n",
	} {
		assert.Contains(t, table.stdout, want)
	}

	// Which services still send traffic to a cluster.
	assert.Equal(t, fmt.Sprintf("No service in namespace %s sends traffic to workload cluster worker-a.\n", f.ns),
		op.run(t, "status", "--workload-cluster", "worker-a", "-n", f.ns).stdout)
	var ct report.ClusterTraffic
	out := op.run(t, "status", "--workload-cluster", "worker-b", "-A", "-o", "json")
	require.Equal(t, 0, out.code, out.stderr)
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &ct))
	assert.Contains(t, ct.Services, report.ClusterService{Namespace: f.ns, TrafficMap: service, Service: service, Weight: 1, Effective: ptrTo(int32(1)), Published: "True/Current"})

	// A hand-edited, malformed annotation: the publisher keeps the last valid drains, and
	// status says so, with the parser's error.
	f.drain(`{"maintenance-a":{"cluster":"worker-a"}}`)
	f.waitCondition("False", "InvalidDrainAnnotation", `reason must be non-empty`)
	st = op.status(t, f.ns)
	assert.Equal(t, report.AnnotationMalformed, st.Drains.State)
	assert.Contains(t, st.Drains.Error, `override "maintenance-a" reason must be non-empty`)
	assert.Equal(t, []report.Drain{{ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"}, {ID: "typo", Cluster: "worker-c", Reason: "wrong cluster"}}, st.Drains.InEffect)
	assert.Equal(t, f.routeWeights("worker-a", "worker-b"), effective(st))
	assert.True(t, st.Sinks.HTTPRoute.MatchesComputed)
	assert.Equal(t, "False", st.Published.Status)
	assert.Equal(t, "InvalidDrainAnnotation", st.Published.Reason)
	table = op.run(t, "status", "chat", "-n", f.ns)
	assert.Contains(t, table.stdout, `Malformed: annotation ome.io/traffic-drain: override "maintenance-a" reason must be non-empty; the publisher keeps the last valid drains: maintenance-a on worker-a, typo on worker-c`)

	// The routing controller applies the drain too: the hold is then in both places.
	_, err := f.routing.ApplyDrain(ctxFor(t), f.ns, service, "worker-a", "maintenance-a")
	require.NoError(t, err)
	f.drain(seedDrain)
	f.waitPublished()
	st = op.status(t, f.ns)
	assert.Equal(t, []report.Hold{{ID: "maintenance-a", Reason: "planned maintenance", Source: "both"}}, st.Clusters[0].HeldBy)
	assert.Equal(t, f.routeWeights("worker-a", "worker-b"), effective(st))
	assert.Equal(t, report.Current, st.Published.Freshness)
}

func (u opsUser) status(t *testing.T, ns string) report.Status {
	t.Helper()
	got := u.run(t, "status", "chat", "-n", ns, "-o", "json")
	require.Equal(t, 0, got.code, got.stderr)
	var st report.Status
	require.NoError(t, json.Unmarshal([]byte(got.stdout), &st))
	return st
}

func effective(st report.Status) map[string]int32 {
	out := map[string]int32{}
	for _, c := range st.Clusters {
		if c.Effective != nil {
			out[c.Cluster] = *c.Effective
		}
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// With a fleet drain (a NoExecute taint on an OME WorkloadCluster), status reads the same
// taint sources as the publisher and shows the taint holding the cluster.
func TestOpsStatusShowsFleetTaints(t *testing.T) {
	f := newFixture(t)
	a, b := f.ns+"-worker-a", f.ns+"-worker-b"
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: a, Endpoint: "https://chat." + a + ".example.com", Weight: 1, Healthy: true},
		{Cluster: b, Endpoint: "https://chat." + b + ".example.com", Weight: 3, Healthy: true},
	})
	f.startPublisher()
	f.waitPublished()
	op := admin(t)

	res := dyn.Resource(model.WorkloadClustersResource)
	wc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ome.io/v1beta1", "kind": "WorkloadCluster",
		"metadata": map[string]any{"name": a, "annotations": map[string]any{weights.TaintsAnnotation: `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`}},
		"spec":     map[string]any{},
	}}
	_, err := res.Create(ctxFor(t), wc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.Delete(context.Background(), a, metav1.DeleteOptions{}) })

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]int32{a: 0, b: 3}, f.routeWeights(a, b))
	}, waitTimeout, tick)
	f.waitPublished()
	st := op.status(t, f.ns)
	assert.Equal(t, f.routeWeights(a, b), effective(st))
	assert.Equal(t, []string{"maintenance=planned:NoExecute"}, st.Clusters[0].Taints)
	assert.True(t, st.Sinks.HTTPRoute.MatchesComputed)
	assert.Contains(t, op.run(t, "status", "chat", "-n", f.ns).stdout, "taint maintenance=planned:NoExecute")
	assert.Equal(t, fmt.Sprintf("No service in namespace %s sends traffic to workload cluster %s.\n", f.ns, a),
		op.run(t, "status", "--workload-cluster", a, "-n", f.ns).stdout)
}
