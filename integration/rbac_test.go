package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/integration/testenv"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
	"github.com/trafficmap/publisher/publish"
)

func helmBinary(t *testing.T) string {
	t.Helper()
	helm, err := testenv.Helm()
	require.NoError(t, err)
	return helm
}

// chartRBAC renders the chart's ServiceAccount and RBAC for a publisher watching ns.
func chartRBAC(t *testing.T, release, ns string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", release, filepath.Join(repoRoot(), "charts", "publisher"), "--namespace", ns,
		"--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml",
		"--set", "publisher.namespaces={" + ns + "}", "--set", "publisher.gateway=" + ns + "/" + gatewayName}
	for _, kv := range set {
		args = append(args, "--set", kv)
	}
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(string(out), "\n---\n") {
		u := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

var rbacResources = map[string]schema.GroupVersionResource{
	"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
	"Role":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
}

// apply creates the objects (cluster-scoped ones are deleted after the test).
func apply(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		gvr, ok := rbacResources[o.GetKind()]
		require.True(t, ok, "unexpected kind %s", o.GetKind())
		res := dyn.Resource(gvr)
		if o.GetNamespace() != "" {
			_, err := res.Namespace(o.GetNamespace()).Create(ctxFor(t), o, metav1.CreateOptions{})
			require.NoError(t, err)
			continue
		}
		_, err := res.Create(ctxFor(t), o, metav1.CreateOptions{})
		require.NoError(t, err)
		name := o.GetName()
		t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
}

// asServiceAccount is a rest config impersonating the chart's ServiceAccount.
func asServiceAccount(ns, name string) *rest.Config {
	rc := rest.CopyConfig(restCfg)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}}
	return rc
}

// The chart's RBAC is enough: the publisher, as the chart's ServiceAccount and with leader
// election on, publishes, drains and sets Published with exactly those permissions.
func TestChartRBACIsEnough(t *testing.T) {
	f := newFixture(t)
	release := "rbac-" + f.ns
	apply(t, chartRBAC(t, release, f.ns, "leaderElection.enabled=true"))
	f.createMap(seedEntries())
	cfg := f.publisherConfig(func(c *publish.Config) {
		// Both sinks, as the chart's default: the replica also keeps its xDS report Lease.
		c.Sinks, c.XDSAddress, c.RequireXDSAck = []string{publish.SinkHTTPRoute, publish.SinkXDS}, "127.0.0.1:0", true
		c.LeaderElection = publish.LeaderElection{Enabled: true, Namespace: f.ns, Name: "trafficmap-publisher", Identity: "rbac-a"}
	})
	f.pub = startPublisherWith(t, cfg, asServiceAccount(f.ns, release+"-trafficmap-publisher"), zaptest.NewLogger(t))
	f.waitPublished()
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Contains(t, f.getMap().Finalizers, model.Finalizer, "patch on trafficmaps: the finalizer")
	report := replicas.LeaseName("trafficmap-publisher", "rbac-a")
	_, err := kube.CoordinationV1().Leases(f.ns).Get(context.Background(), report, metav1.GetOptions{})
	require.NoError(t, err, "the replica wrote its report Lease")
	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	f.waitMapGone() // the teardown, finalizer removal included, needs nothing more
	f.pub.stop(t)
	_, err = kube.CoordinationV1().Leases(f.ns).Get(context.Background(), report, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the replica deleted its report Lease when it stopped: %v", err)
}

// Removing any one rule of the chart's RBAC makes the publisher fail with a permission
// error that names the resource.
func TestChartRBACEveryRuleIsNeeded(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	// With backendKind service-externalname: the rules of the other kinds (endpointslices,
	// and gateways and gatewayclasses for auto) are not rendered; backendkind_test.go runs
	// those kinds with the chart's RBAC.
	rendered := chartRBAC(t, "probe", f.ns, "leaderElection.enabled=true", "publisher.backendKind=service-externalname")
	var rules []struct {
		kind, object string // object: the suffix that tells the chart's two Roles apart
		index        int
		names        string
	}
	for _, o := range rendered {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		list, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for i, r := range list {
			res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
			object := "-trafficmap-publisher"
			if strings.HasSuffix(o.GetName(), "-leader-election") {
				object = "-leader-election"
			}
			if strings.HasSuffix(o.GetName(), "-claims") {
				object = "-claims"
			}
			rules = append(rules, struct {
				kind, object string
				index        int
				names        string
			}{o.GetKind(), object, i, strings.Join(res, ",")})
		}
	}
	require.Len(t, rules, 10, "six namespaced rules, two for the cluster-scoped taint sources, one for the Lease, one for the claim records")

	for n, rule := range rules {
		t.Run(rule.kind+"/"+rule.names, func(t *testing.T) {
			release := "drop" + string(rune('a'+n)) + "-" + f.ns
			objs := chartRBAC(t, release, f.ns, "leaderElection.enabled=true", "publisher.backendKind=service-externalname")
			for _, o := range objs {
				if o.GetKind() == rule.kind && strings.HasSuffix(o.GetName(), rule.object) {
					list, _, _ := unstructured.NestedSlice(o.Object, "rules")
					require.NoError(t, unstructured.SetNestedSlice(o.Object, append(list[:rule.index:rule.index], list[rule.index+1:]...), "rules"))
				}
			}
			apply(t, objs)
			core, logs := observer.New(zapcore.ErrorLevel)
			log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
			// As the binary does (cmd/publisher), client-go's own reports (the Lease's and the
			// event sink's permission errors) go through the same logger.
			t.Cleanup(captureKlog(core))
			cfg := f.publisherConfig(func(c *publish.Config) {
				c.LeaderElection = publish.LeaderElection{Enabled: true, Namespace: f.ns, Name: "lease-" + release}
				c.BackendKind = httproute.BackendExternalName
			})
			resource := strings.Split(rule.names, ",")[0]
			if resource == "events" {
				// A first publication is no Event: a malformed drain annotation is (a
				// Warning), and the publisher cannot record it.
				f.setAnnotation(service, "ome.io/traffic-drain", "not json", false)
				t.Cleanup(func() { f.setAnnotation(service, "ome.io/traffic-drain", "", true) })
			}
			startPublisherWith(t, cfg, asServiceAccount(f.ns, release+"-trafficmap-publisher"), log)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				found := false
				for _, e := range logs.All() {
					text := e.Message
					for _, fld := range e.Context {
						if fld.Type == zapcore.ErrorType {
							text += " " + fld.Interface.(error).Error()
						}
					}
					found = found || (strings.Contains(text, "forbidden") || strings.Contains(text, "permission denied")) && strings.Contains(text, resource)
				}
				assert.True(c, found, "an error log names the missing permission on %s", resource)
			}, waitTimeout, tick)
		})
	}
}

// helm install works against the real API server in both modes: standalone creates the
// Deployment, Service and RBAC; sidecar only the ServiceAccount and RBAC. Neither release
// holds a CRD (the chart has no crds/ folder and crds.install is off by default), and with
// crds.install=true Helm refuses to take over the TrafficMap CRD that is already installed.
func TestHelmInstallBothModes(t *testing.T) {
	f := newFixture(t)
	admin := newOpsUser(t, "helm", "system:masters")
	helmEnv := append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	helm := func(args ...string) (string, error) {
		cmd := exec.Command(helmBinary(t), append(args, "--namespace", f.ns, "--kubeconfig", admin.kubeconfig)...)
		cmd.Env = helmEnv
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// tryInstall installs the chart with these --set values (and flags, which start with --).
	tryInstall := func(release string, set ...string) (string, error) {
		args := []string{"install", release, filepath.Join(repoRoot(), "charts", "publisher"),
			"--set", "publisher.gateway=" + f.ns + "/" + gatewayName}
		for _, kv := range set {
			if strings.HasPrefix(kv, "--") {
				args = append(args, kv)
			} else {
				args = append(args, "--set", kv)
			}
		}
		t.Cleanup(func() { _, _ = helm("uninstall", release) })
		return helm(args...)
	}
	install := func(release string, set ...string) string {
		out, err := tryInstall(release, set...)
		require.NoError(t, err, out)
		manifest, err := helm("get", "manifest", release)
		require.NoError(t, err, manifest)
		assert.NotContains(t, manifest, "kind: CustomResourceDefinition", "the release holds no CRD")
		return out
	}

	notes := install("standalone", "publisher.namespaces={"+f.ns+"}")
	assert.Contains(t, notes, "STATUS: deployed")
	assert.Contains(t, notes, "kubectl get trafficmap -A", "NOTES tell how to check PUBLISHED")
	assert.Contains(t, notes, "this release did not install it (crds.install=false)")
	_, err := kube.AppsV1().Deployments(f.ns).Get(ctxFor(t), "standalone-trafficmap-publisher", metav1.GetOptions{})
	require.NoError(t, err)
	_, err = kube.CoreV1().Services(f.ns).Get(ctxFor(t), "standalone-trafficmap-publisher", metav1.GetOptions{})
	require.NoError(t, err)
	_, err = kube.RbacV1().Roles(f.ns).Get(ctxFor(t), "standalone-trafficmap-publisher", metav1.GetOptions{})
	require.NoError(t, err)

	notes = install("sidecar", "mode=sidecar", "publisher.namespaces={"+f.ns+"}", "xds.bindAddress=127.0.0.1")
	assert.Contains(t, notes, `include the container template "trafficmap-publisher.container"`)
	_, err = kube.CoreV1().ServiceAccounts(f.ns).Get(ctxFor(t), "sidecar-trafficmap-publisher", metav1.GetOptions{})
	require.NoError(t, err)
	_, err = kube.AppsV1().Deployments(f.ns).Get(ctxFor(t), "sidecar-trafficmap-publisher", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "sidecar mode renders no Deployment")

	// The TrafficMap CRD here was installed by envtest, as OME would have: Helm does not
	// adopt it, so crds.install=true is refused. A server dry run makes that check without
	// recording a release whose uninstall could touch the CRD.
	out, err := tryInstall("crds", "mode=sidecar", "publisher.namespaces={"+f.ns+"}", "crds.install=true", "--dry-run=server")
	require.Error(t, err)
	assert.Contains(t, out, `CustomResourceDefinition "trafficmaps.ome.io"`)
	assert.Contains(t, out, "exists and cannot be imported into the current release")
}

// With publisher.sinks={xds} the chart grants configmaps, where the publisher records the
// last valid drains (no route carries them): with that rule the record is written, without it
// the publisher logs a permission error naming configmaps. With the default sinks the rule is
// not rendered (TestChartRBACEveryRuleIsNeeded counts the default rules).
func TestChartRBACXDSOnlyRecord(t *testing.T) {
	run := func(t *testing.T, dropConfigMaps bool) (*fixture, *observer.ObservedLogs) {
		f := newFixture(t)
		release := "xds-" + f.ns
		objs := chartRBAC(t, release, f.ns, "publisher.sinks={xds}")
		found := false
		for _, o := range objs {
			if o.GetKind() != "Role" {
				continue
			}
			list, _, _ := unstructured.NestedSlice(o.Object, "rules")
			kept := list[:0:0]
			for _, r := range list {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				if strings.Join(res, ",") == "configmaps" {
					found = true
					if dropConfigMaps {
						continue
					}
				}
				kept = append(kept, r)
			}
			require.NoError(t, unstructured.SetNestedSlice(o.Object, kept, "rules"))
		}
		require.True(t, found, "the xds-only chart grants configmaps")
		apply(t, objs)
		f.createMap(seedEntries())
		core, logs := observer.New(zapcore.ErrorLevel)
		log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
		cfg := f.publisherConfig(func(c *publish.Config) {
			c.Sinks, c.XDSAddress = []string{publish.SinkXDS}, "127.0.0.1:0"
			c.ClaimNamespace = f.ns // the release namespace, where the chart grants the claim records
		})
		f.pub = startPublisherWith(t, cfg, asServiceAccount(f.ns, release+"-trafficmap-publisher"), log)
		return f, logs
	}
	t.Run("granted", func(t *testing.T) {
		f, _ := run(t, false)
		f.drain(seedDrain)
		f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
		rec, err := kube.CoreV1().ConfigMaps(f.ns).Get(ctxFor(t), publish.RecordName(service), metav1.GetOptions{})
		require.NoError(t, err)
		assert.JSONEq(t, seedDrain, rec.Data[model.RecordKeyDrains])
	})
	t.Run("dropped", func(t *testing.T) {
		_, logs := run(t, true)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			found := false
			for _, e := range logs.All() {
				text := e.Message
				for _, fld := range e.Context {
					if fld.Type == zapcore.ErrorType {
						text += " " + fld.Interface.(error).Error()
					}
				}
				found = found || strings.Contains(text, "forbidden") && strings.Contains(text, "configmaps")
			}
			assert.True(c, found, "an error log names the missing permission on configmaps")
		}, waitTimeout, tick)
	})
}
