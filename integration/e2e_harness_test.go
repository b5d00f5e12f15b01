//go:build e2e

package integration

// The end-to-end harness (make e2e, issue 45): real Gateway API implementations built from
// their Go modules by hack/gateways.sh (Traefik as controller and proxy, the Envoy Gateway
// controller), run as processes against the package's envtest control plane, and backends
// that say which cluster answered, reached through a network namespace because the API
// server refuses loopback addresses in EndpointSlices. Nothing here is skipped: a missing
// binary, variable or privilege fails the test and says what to do.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
)

// Versions hack/gateways.sh builds; the folder it prints names them.
const (
	traefikVersion      = "v3.6.12"
	envoyGatewayVersion = "v1.9.1"
	// gatewaysEnv names the folder holding traefik and envoy-gateway (make e2e sets it to
	// what hack/gateways.sh prints).
	gatewaysEnv = "TRAFFICMAP_GATEWAYS"
	// backendEnv, set only on a re-executed test binary, makes it the backend server (see
	// init): a comma-separated list of address=cluster.
	backendEnv = "TRAFFICMAP_E2E_BACKEND"
	// backendPort is where every backend listens, on its own address in the namespace.
	backendPort = 8080
	// backendPortName is the Service and EndpointSlice port name: Traefik matches slice ports
	// to the Service port by name.
	backendPortName = "http"

	traefikController = "traefik.io/gateway-controller"
	egController      = "gateway.envoyproxy.io/gatewayclass-controller"
)

// init turns a re-executed test binary into the backend server before TestMain starts a
// control plane: it runs inside the test's network namespace (ip netns exec) and answers
// every request with the name of the cluster whose address received it.
func init() {
	spec := os.Getenv(backendEnv)
	if spec == "" {
		return
	}
	if err := serveBackends(spec); err != nil {
		fmt.Fprintln(os.Stderr, "e2e backend:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveBackends listens on each address=cluster of spec and answers with the cluster's name
// (body and X-Cluster header) and the time it served the request (X-Served-At, Unix
// nanoseconds: the same clock as the test's) until stdin closes, which is how the test stops
// it.
func serveBackends(spec string) error {
	errs := make(chan error, 1)
	for _, item := range strings.Split(spec, ",") {
		addr, cluster, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("malformed %s item %q", backendEnv, item)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cluster", cluster)
			w.Header().Set("X-Served-At", strconv.FormatInt(time.Now().UnixNano(), 10))
			_, _ = io.WriteString(w, cluster)
		})
		go func() { errs <- http.Serve(l, mux) }()
	}
	fmt.Println("ready")
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); errs <- nil }()
	return <-errs
}

// gatewayBinary returns the path of a gateway binary in $TRAFFICMAP_GATEWAYS, failing the
// test when the variable or the binary is missing.
func gatewayBinary(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv(gatewaysEnv)
	require.NotEmpty(t, dir, "%s must name the folder hack/gateways.sh prints (run make e2e, or export %s=$(bash hack/gateways.sh))", gatewaysEnv, gatewaysEnv)
	path := filepath.Join(dir, name)
	st, err := os.Stat(path)
	require.NoError(t, err, "%s (Traefik %s, Envoy Gateway %s): build it with bash hack/gateways.sh", path, traefikVersion, envoyGatewayVersion)
	require.True(t, st.Mode().IsRegular() && st.Mode()&0o111 != 0, "%s is not an executable file", path)
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// randUint returns a uniformly random number below n.
func randUint(n uint64) uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) % n
}

// runIP runs ip with args and fails the test with its output on error.
func runIP(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
}

// backendNet is one test's backends: a network namespace joined to the root namespace by a
// veth pair on a random /24 of 198.18.0.0/15 (set aside for benchmarking), the host side
// .1, and per cluster an address .2, .3, ... served by one backend process.
type backendNet struct {
	netns string
	addrs map[string]string // cluster -> IP
}

// startBackends makes the namespace and starts one backend answering for each cluster, all
// removed when the test ends.
func startBackends(t *testing.T, clusters ...string) *backendNet {
	t.Helper()
	requireRoot(t)
	id := fmt.Sprintf("%06x", randUint(1<<24))
	b := &backendNet{netns: "tmpe2e-" + id, addrs: map[string]string{}}
	prefix := freePrefix(t)
	host, peer := "tme"+id+"h", "tme"+id+"n"
	runIP(t, "netns", "add", b.netns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", b.netns).Run()
		_ = exec.Command("ip", "link", "del", host).Run() // gone with the namespace's peer already
	})
	runIP(t, "link", "add", host, "type", "veth", "peer", "name", peer)
	runIP(t, "link", "set", peer, "netns", b.netns)
	runIP(t, "addr", "add", prefix+".1/24", "dev", host)
	runIP(t, "link", "set", host, "up")
	var spec []string
	for i, c := range clusters {
		ip := fmt.Sprintf("%s.%d", prefix, i+2)
		b.addrs[c] = ip
		runIP(t, "-n", b.netns, "addr", "add", ip+"/24", "dev", peer)
		spec = append(spec, net.JoinHostPort(ip, strconv.Itoa(backendPort))+"="+c)
	}
	runIP(t, "-n", b.netns, "link", "set", peer, "up")
	runIP(t, "-n", b.netns, "link", "set", "lo", "up")

	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", b.netns, self)
	cmd.Env = append(os.Environ(), backendEnv+"="+strings.Join(spec, ","))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "backend process did not start")
	require.Equal(t, "ready\n", line)
	// The host's side reaches every backend directly (the veth's /24 is on-link).
	for c, ip := range b.addrs {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			got, err := getCluster(http.DefaultClient, "http://"+net.JoinHostPort(ip, strconv.Itoa(backendPort)), "")
			require.NoError(ct, err)
			assert.Equal(ct, c, got)
		}, waitTimeout, tick)
	}
	return b
}

// freePrefix picks a random 198.18.0.0/15 /24 (as "a.b.c") no interface of the root
// namespace has an address in.
func freePrefix(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "-4", "addr").Output()
	require.NoError(t, err)
	for range 64 {
		n := randUint(512)
		prefix := fmt.Sprintf("198.%d.%d", 18+n/256, n%256)
		if !strings.Contains(string(out), " "+prefix+".") {
			return prefix
		}
	}
	require.FailNow(t, "no free /24 in 198.18.0.0/15")
	return ""
}

// url returns the backend URL of cluster (an IP endpoint, used as it is).
func (b *backendNet) url(cluster string) string {
	return "http://" + net.JoinHostPort(b.addrs[cluster], strconv.Itoa(backendPort))
}

// answer is what one request got: the cluster that served it ("HTTP <code>" for a status
// other than 200) and when the backend served it (zero for an error status).
type answer struct {
	who      string
	servedAt time.Time
}

// ask sends one GET to url with the Host header host ("" keeps the URL's).
func ask(c *http.Client, url, host string) (answer, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return answer{}, err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return answer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return answer{who: fmt.Sprintf("HTTP %d", resp.StatusCode)}, nil
	}
	ns, err := strconv.ParseInt(resp.Header.Get("X-Served-At"), 10, 64)
	if err != nil {
		return answer{}, fmt.Errorf("answer from %q without X-Served-At: %w", body, err)
	}
	return answer{who: string(body), servedAt: time.Unix(0, ns)}, nil
}

// getCluster is ask's cluster alone.
func getCluster(c *http.Client, url, host string) (string, error) {
	a, err := ask(c, url, host)
	return a.who, err
}

// proxyClient is an HTTP client for requests through a gateway: no proxy from the
// environment, keep-alive connections, a short timeout.
func proxyClient() *http.Client {
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8},
	}
}

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

// process is a gateway binary running for one test; its output goes to a file whose tail
// the test log shows when the test fails.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProcess runs cmd with its output in a log file, stopped (SIGTERM, then SIGKILL) when
// the test ends.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{cmd: cmd, log: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start(), "start %s", name)
	go func() { _ = cmd.Wait(); _ = f.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output (last 60 lines of %s):\n%s", name, p.log, tail(p.log, 60))
		}
	})
	return p
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// traefikThrottle is Traefik's providersThrottleDuration, set to its default explicitly:
// after applying a new configuration, Traefik applies the next no sooner than this, while it
// writes route status at once. The traffic checks wait this long (and a margin) after a
// change is published before they sample the new shares; the invariant checks (nothing
// after Published True reaches the old state) do not.
const traefikThrottle = 2 * time.Second

// afterThrottle waits until Traefik has applied any configuration it received by at.
func afterThrottle(t *testing.T, at time.Time) {
	t.Helper()
	require.Eventually(t, func() bool { return time.Since(at) > traefikThrottle+500*time.Millisecond }, waitTimeout, tick)
}

// traefik is a Traefik process serving one namespace's Gateways on one entry point.
type traefik struct {
	proc *process
	port int    // the entry point's port, which the Gateway's listener must name
	addr string // 127.0.0.1:port
}

// startTraefik runs Traefik with its Kubernetes Gateway provider on the envtest API server
// (KUBECONFIG), watching namespace ns, with one HTTP entry point "web" on a free port.
func startTraefik(t *testing.T, ns string) *traefik {
	t.Helper()
	bin := gatewayBinary(t, "traefik")
	tr := &traefik{port: freePort(t)}
	tr.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tr.port))
	cmd := exec.Command(bin,
		"--entrypoints.web.address="+tr.addr,
		"--providers.kubernetesgateway=true",
		"--providers.kubernetesgateway.namespaces="+ns,
		"--providers.kubernetesgateway.statusaddress.ip=127.0.0.1",
		"--providers.providersthrottleduration="+traefikThrottle.String(),
		"--global.checknewversion=false",
		"--global.sendanonymoususage=false",
		"--log.level=INFO")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigFile(t, "traefik-"+ns))
	tr.proc = startProcess(t, "traefik", cmd)
	return tr
}

// createGatewayClass creates a cluster-scoped GatewayClass for controller, named after the
// test's namespace, deleted when the test ends.
func createGatewayClass(t *testing.T, name, controller string) {
	t.Helper()
	_, err := gw.GatewayV1().GatewayClasses().Create(ctxFor(t), &gwapiv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gwapiv1.GatewayClassSpec{ControllerName: gwapiv1.GatewayController(controller)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = gw.GatewayV1().GatewayClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// createGateway creates Gateway name in ns of class with one HTTP listener "web" on port.
func createGateway(t *testing.T, ns, name, class string, port int) {
	t.Helper()
	_, err := gw.GatewayV1().Gateways(ns).Create(ctxFor(t), &gwapiv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: gwapiv1.GatewaySpec{
			GatewayClassName: gwapiv1.ObjectName(class),
			Listeners: []gwapiv1.Listener{{
				Name: "web", Port: gwapiv1.PortNumber(port), Protocol: gwapiv1.HTTPProtocolType,
			}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitGatewayCondition waits until the Gateway has condition typ True at its generation.
func waitGatewayCondition(t *testing.T, ns, name, typ string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		g, err := gw.GatewayV1().Gateways(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(c, err)
		cond := meta.FindStatusCondition(g.Status.Conditions, typ)
		require.NotNil(c, cond, "gateway %s/%s has no %s condition yet", ns, name, typ)
		assert.Equal(c, g.Generation, cond.ObservedGeneration)
		assert.Equal(c, metav1.ConditionTrue, cond.Status, "%s: %s", cond.Reason, cond.Message)
	}, 2*waitTimeout, tick)
}

// traefikGateway starts Traefik for the fixture's namespace with its GatewayClass and the
// publisher's Gateway (gatewayName) on Traefik's entry point, and waits until Traefik has
// programmed it.
func traefikGateway(t *testing.T, ns string) *traefik {
	t.Helper()
	tr := startTraefik(t, ns)
	class := "traefik-" + ns
	createGatewayClass(t, class, traefikController)
	createGateway(t, ns, gatewayName, class, tr.port)
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
			Name: backendPortName, Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(backendPort),
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
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(backendPortName), Port: ptr.To[int32](backendPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
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
