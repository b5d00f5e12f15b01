//go:build e2e

package integration

// The end-to-end harness (make e2e, issue 45): real Gateway API implementations built from
// their Go modules by hack/gateways.sh (Traefik as controller and proxy, the Envoy Gateway
// controller), run as processes against the package's envtest control plane, and backends
// that say which cluster answered, reached through a network namespace because the API
// server refuses loopback addresses in EndpointSlices. Nothing here is skipped: a missing
// binary, variable or privilege fails the test and says what to do.

import (
	"context"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/integration/gatewaykit"
)

// Names the e2e tests share with the gateway kit (integration/gatewaykit).
const (
	traefikVersion      = gatewaykit.TraefikVersion
	envoyGatewayVersion = gatewaykit.EnvoyGatewayVersion
	// gatewaysEnv names the folder holding traefik and envoy-gateway (make e2e sets it to
	// what hack/gateways.sh prints).
	gatewaysEnv = "TRAFFICMAP_GATEWAYS"
	// backendPortName is the Service and EndpointSlice port name: Traefik matches slice ports
	// to the Service port by name.
	backendPortName = gatewaykit.BackendPortName

	traefikController = gatewaykit.TraefikController
	egController      = "gateway.envoyproxy.io/gatewayclass-controller"
	// traefikThrottle is Traefik's providersThrottleDuration (gatewaykit.TraefikThrottle).
	// The traffic checks wait this long (and a margin) after a change is published before
	// they sample the new shares; the invariant checks (nothing after Published True
	// reaches the old state) do not.
	traefikThrottle = gatewaykit.TraefikThrottle
)

// The gateway kit's types under the names the e2e tests use.
type (
	answer     = gatewaykit.Answer
	backendNet = gatewaykit.Backends
	traefik    = gatewaykit.Traefik
	process    = gatewaykit.Process
)

// init turns a re-executed test binary into the backend server before TestMain starts a
// control plane (gatewaykit.StartBackends runs it in the backends' network namespace).
func init() { gatewaykit.ServeBackendsIfAsked() }

// gatewayBinary returns the path of a gateway binary in $TRAFFICMAP_GATEWAYS, failing the
// test when the variable or the binary is missing.
func gatewayBinary(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv(gatewaysEnv)
	require.NotEmpty(t, dir, "%s must name the folder hack/gateways.sh prints (run make e2e, or export %s=$(bash hack/gateways.sh))", gatewaysEnv, gatewaysEnv)
	path, err := gatewaykit.Binary(dir, name)
	require.NoError(t, err)
	return path
}

// requireRoot fails unless the test runs as root (network namespaces, veth pairs, mounts).
func requireRoot(t *testing.T) {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "the e2e tests make a network namespace and veth pair for the backends: run them as root")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago (listen on :0, close).
func freePort(t *testing.T) int {
	t.Helper()
	port, err := gatewaykit.FreePort()
	require.NoError(t, err)
	return port
}

// startBackends starts backends answering for each cluster (gatewaykit.StartBackends),
// removed when the test ends.
func startBackends(t *testing.T, clusters ...string) *backendNet {
	t.Helper()
	requireRoot(t)
	b, err := gatewaykit.StartBackends(clusters...)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

// ask sends one GET to url with the Host header host ("" keeps the URL's).
func ask(c *http.Client, url, host string) (answer, error) { return gatewaykit.Ask(c, url, host) }

// getCluster is ask's cluster alone.
func getCluster(c *http.Client, url, host string) (string, error) {
	a, err := ask(c, url, host)
	return a.Who, err
}

// proxyClient is an HTTP client for requests through a gateway (gatewaykit.ProxyClient).
func proxyClient() *http.Client { return gatewaykit.ProxyClient() }

// spreadHTTP sends n requests for host to the gateway at addr, one after the other, and
// counts who answered ("HTTP <code>" for errors).
func spreadHTTP(t *testing.T, c *http.Client, addr, host string, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		who, err := getCluster(c, "http://"+addr+"/", host)
		require.NoError(t, err)
		got[who]++
	}
	return got
}

// sigmas is the binomial bound the traffic shares are held to: a cluster with share p of n
// requests gets n*p +- sigmas*sqrt(n*p*(1-p)). At 4.5 sigma a correct split fails about
// once in 150,000 comparisons (two-sided normal tail 6.8e-6), while at n = 400 a share off
// by 0.1 is caught (its deviation, 40, is over 4.5 sigma, 39, of a 1:3 split).
const sigmas = 4.5

// requireShares asserts that got (counts of n requests) matches the weights within the
// binomial bound and that nothing else answered.
func requireShares(t *testing.T, got map[string]int, weights map[string]int, n int) {
	t.Helper()
	total := 0
	for _, w := range weights {
		total += w
	}
	require.Positive(t, total)
	for who := range got {
		_, known := weights[who]
		require.True(t, known, "unexpected answer %q in %v", who, got)
	}
	for cluster, w := range weights {
		p := float64(w) / float64(total)
		want := float64(n) * p
		bound := sigmas * math.Sqrt(float64(n)*p*(1-p))
		assert.InDelta(t, want, float64(got[cluster]), bound+1e-9,
			"%s: weight %d/%d of %d requests: want %.1f +- %.1f (%.1f sigma), got %d (all: %v)", cluster, w, total, n, want, bound, sigmas, got[cluster], got)
	}
}

// kubeconfigFile writes an admin kubeconfig for the envtest control plane (a new
// system:masters user) and returns its path.
func kubeconfigFile(t *testing.T, user string) string {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	data, err := u.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// startProcess runs cmd with its output in a log file, stopped (SIGTERM, then SIGKILL) when
// the test ends; the test log shows the output's tail when the test fails.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	p, err := gatewaykit.StartProcess(cmd, filepath.Join(t.TempDir(), name+".log"))
	require.NoError(t, err, "start %s", name)
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s output (last 60 lines of %s):\n%s", name, p.LogPath(), p.Tail(60))
		}
	})
	return p
}

// afterThrottle waits until Traefik has applied any configuration it received by at.
func afterThrottle(t *testing.T, at time.Time) {
	t.Helper()
	require.Eventually(t, func() bool { return time.Since(at) > traefikThrottle+500*time.Millisecond }, waitTimeout, tick)
}

// startTraefik runs Traefik with its Kubernetes Gateway provider on the envtest API server,
// watching namespace ns, with one HTTP entry point "web" on a free port, stopped when the
// test ends.
func startTraefik(t *testing.T, ns string) *traefik {
	t.Helper()
	tr, err := gatewaykit.StartTraefik(gatewayBinary(t, "traefik"), kubeconfigFile(t, "traefik-"+ns), ns, filepath.Join(t.TempDir(), "traefik.log"))
	require.NoError(t, err)
	t.Cleanup(func() {
		tr.Proc.Stop()
		if t.Failed() {
			t.Logf("traefik output (last 60 lines of %s):\n%s", tr.Proc.LogPath(), tr.Proc.Tail(60))
		}
	})
	return tr
}

// createGatewayClass creates a cluster-scoped GatewayClass for controller, deleted when the
// test ends.
func createGatewayClass(t *testing.T, name, controller string) {
	t.Helper()
	require.NoError(t, gatewaykit.CreateGatewayClass(ctxFor(t), gw, name, controller))
	t.Cleanup(func() {
		_ = gw.GatewayV1().GatewayClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// createGateway creates Gateway name in ns of class with one HTTP listener "web" on port.
func createGateway(t *testing.T, ns, name, class string, port int) {
	t.Helper()
	require.NoError(t, gatewaykit.CreateGateway(ctxFor(t), gw, ns, name, class, port))
}

// waitGatewayCondition waits until the Gateway has condition typ True at its generation.
func waitGatewayCondition(t *testing.T, ns, name, typ string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	require.NoError(t, gatewaykit.WaitGatewayCondition(ctx, gw, ns, name, typ))
}

// traefikGateway starts Traefik for the fixture's namespace with its GatewayClass and the
// publisher's Gateway (gatewayName) on Traefik's entry point, and waits until Traefik has
// programmed it.
func traefikGateway(t *testing.T, ns string) *traefik {
	t.Helper()
	tr := startTraefik(t, ns)
	class := "traefik-" + ns
	createGatewayClass(t, class, traefikController)
	createGateway(t, ns, gatewayName, class, tr.Port)
	waitGatewayCondition(t, ns, gatewayName, string(gwapiv1.GatewayConditionProgrammed))
	return tr
}

// backendService creates a Service without a selector for cluster and its one EndpointSlice
// with the backend's address, ready, on the named port: what a gateway reading
// EndpointSlices resolves.
func backendService(t *testing.T, ns, name, ip string) {
	t.Helper()
	_, err := kube.CoreV1().Services(ns).Create(ctxFor(t), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: backendPortName, Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(gatewaykit.BackendPort),
		}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.DiscoveryV1().EndpointSlices(ns).Create(ctxFor(t), &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   "e2e.trafficmap.dev",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(backendPortName), Port: ptr.To[int32](gatewaykit.BackendPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// weightedRef is a backendRef to Service name port 80 with weight w.
func weightedRef(name string, w int32) gwapiv1.HTTPBackendRef {
	return gwapiv1.HTTPBackendRef{BackendRef: gwapiv1.BackendRef{
		BackendObjectReference: gwapiv1.BackendObjectReference{Name: gwapiv1.ObjectName(name), Port: ptr.To[gwapiv1.PortNumber](80)},
		Weight:                 ptr.To(w),
	}}
}

// createRoute creates HTTPRoute name for host with parents gateways (in ns) and one rule of refs.
func createRoute(t *testing.T, ns, name, host string, parents []string, refs ...gwapiv1.HTTPBackendRef) {
	t.Helper()
	var prs []gwapiv1.ParentReference
	for _, p := range parents {
		prs = append(prs, gwapiv1.ParentReference{Name: gwapiv1.ObjectName(p)})
	}
	_, err := gw.GatewayV1().HTTPRoutes(ns).Create(ctxFor(t), &gwapiv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: gwapiv1.HTTPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: prs},
			Hostnames:       []gwapiv1.Hostname{gwapiv1.Hostname(host)},
			Rules:           []gwapiv1.HTTPRouteRule{{BackendRefs: refs}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// routeParentCondition waits until route's status for parent, written by controller, has
// condition typ at the route's generation, and returns it.
func routeParentCondition(t *testing.T, ns, route, parent, controller, typ string) metav1.Condition {
	t.Helper()
	var out metav1.Condition
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := gw.GatewayV1().HTTPRoutes(ns).Get(context.Background(), route, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			assert.Fail(c, "route not found")
			return
		}
		require.NoError(c, err)
		for _, p := range r.Status.Parents {
			if string(p.ParentRef.Name) != parent {
				continue
			}
			assert.Equal(c, controller, string(p.ControllerName))
			cond := meta.FindStatusCondition(p.Conditions, typ)
			require.NotNil(c, cond, "no %s condition from %s yet", typ, parent)
			require.Equal(c, r.Generation, cond.ObservedGeneration)
			out = *cond
			return
		}
		assert.Fail(c, "no status for parent "+parent, "parents: %+v", r.Status.Parents)
	}, 2*waitTimeout, tick)
	return out
}
