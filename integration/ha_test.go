package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
	"github.com/trafficmap/publisher/publish"
)

// haLease names the election Lease of the HA tests.
const haLease = "publisher"

// Election timings short enough for a test (the Lease and every report expire 3s after
// their last renewal).
const haLeaseDuration = 3 * time.Second

// haReplica configures an in-process replica: the xDS sink alone, ACKs required, leader
// election on the fixture's namespace with identity id.
func haReplica(f *fixture, id string, reg prometheus.Registerer) func(*publish.Config) {
	return func(c *publish.Config) {
		c.Sinks, c.XDSAddress, c.HTTPAddress, c.RequireXDSAck = []string{publish.SinkXDS}, "127.0.0.1:0", "127.0.0.1:0", true
		c.XDSReconnectGrace, c.Registerer = time.Second, reg
		c.LeaderElection = publish.LeaderElection{Enabled: true, Namespace: f.ns, Name: haLease, Identity: id,
			LeaseDuration: haLeaseDuration, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}
	}
}

// processReplica is a replica run as its own process (`publisher run`), so that it can be
// killed with SIGKILL: it then deletes nothing and its report Lease stays until it expires.
type processReplica struct {
	cmd  *exec.Cmd
	addr net.Addr // its xDS server
}

// startProcessReplica runs `publisher run` with the settings of haReplica and waits until it
// serves xDS; its address is read from its JSON log ("serving xds", field address).
func startProcessReplica(t *testing.T, f *fixture, id string) *processReplica {
	t.Helper()
	cmd := exec.Command(publisherBinary(t), "run", "--kubeconfig", admin(t).kubeconfig, "--namespace", f.ns,
		"--sinks", "xds", "--xds-address", "127.0.0.1:0", "--http-address", "", "--require-xds-ack",
		"--xds-reconnect-grace", "1s", "--host-template", "{{.Service}}.{{.Namespace}}.example.com",
		"--leader-elect", "--leader-election-namespace", f.ns, "--leader-election-id", haLease, "--leader-election-identity", id,
		"--leader-election-lease-duration", haLeaseDuration.String(), "--leader-election-renew-deadline", "2s",
		"--leader-election-retry-period", "250ms", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var entry struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal(sc.Bytes(), &entry) == nil && entry.Msg == "serving xds" {
				addr <- entry.Address
			}
			t.Log(id + ": " + sc.Text())
		}
	}()
	select {
	case a := <-addr:
		tcp, err := net.ResolveTCPAddr("tcp", a)
		require.NoError(t, err)
		return &processReplica{cmd: cmd, addr: tcp}
	case <-time.After(waitTimeout):
		require.FailNow(t, "replica process did not serve xds", id)
		return nil
	}
}

// leaseHolder is the identity holding the election Lease ("" when none).
func leaseHolder(t *testing.T, ns string) string {
	l, err := kube.CoordinationV1().Leases(ns).Get(context.Background(), haLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	require.NoError(t, err)
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Three replicas with leader election; real gRPC clients on two followers (one a process).
// Published waits for every live replica's relevant clients, names the replica and the
// client it waits for, and when Published turns True every client routes by the new
// weights. A follower killed with SIGKILL while one of its clients is frozen stops counting
// once its report expires, not before; the client counts on the replica it reconnects to.
// When the leader goes, another takes over without changing an unchanged map's condition,
// and the next drain publishes normally.
func TestHAEveryReplicasClientsCount(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "worker-a"), Weight: 1, Healthy: true},
		{Cluster: "worker-b", Endpoint: localBackend(t, "worker-b"), Weight: 1, Healthy: true},
	})
	a := startPublisherWith(t, f.publisherConfig(haReplica(f, "a", prometheus.NewRegistry())), restCfg, zaptest.NewLogger(t).Named("a"))
	f.waitPublished()
	require.Equal(t, "a", leaseHolder(t, f.ns), "a was alone")
	regB := prometheus.NewRegistry()
	b := startPublisherWith(t, f.publisherConfig(haReplica(f, "b", regB)), restCfg, zaptest.NewLogger(t).Named("b"))
	c := startProcessReplica(t, f, "c")
	onC := &runningPublisher{xdsAddr: c.addr}

	target := service + "." + f.ns
	clientB, clientC := xdsClient(t, b.xdsAddr, "grpc-b", target), xdsClient(t, c.addr, "grpc-c", target)
	_, err := call(clientB)
	require.NoError(t, err)
	_, err = call(clientC)
	require.NoError(t, err)
	frozen := startFrozenClient(t, onC, grpcNode("frozen-c"), mapNames(f.ns))
	require.Eventually(t, func() bool { return frozen.responses() >= 3 }, waitTimeout, tick, "the frozen client got the map")

	// What one drain and one undrain cost in report writes at three replicas (reported in
	// BENCHMARKS.md; nothing is asserted about it).
	for _, step := range []struct{ drain, weights string }{
		{seedDrain, "worker-a=0 (drained by maintenance-a), worker-b=1"}, {"", "worker-a=1, worker-b=1"},
	} {
		changed, renewed := countReportWrites(t, f, func() {
			f.setAnnotation(service, "ome.io/traffic-drain", step.drain, step.drain == "")
			f.waitPublishedWith("3/3 relevant clients ACKed; weights " + step.weights)
		})
		t.Logf("report lease writes for one change (drain %t) at 3 replicas: %d with a changed report, %d renewals", step.drain != "", changed, renewed)
	}

	// A drain while a client of follower c does not ACK: Published waits and says where.
	frozen.freeze()
	w := f.watchPublished()
	f.drain(seedDrain)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), `replica c: 1/2 relevant clients ACKed, waiting for "frozen-c"/sotw-`)
	assert.Equal(t, map[string]int{"worker-b": 20}, spread(t, clientB, 20), "b's client has the drain")
	assert.Equal(t, map[string]int{"worker-b": 20}, spread(t, clientC, 20), "c's real client has the drain")
	for _, tr := range w.transitions() {
		assert.NotEqual(t, metav1.ConditionTrue, tr.Status, "no True while the client of c has not ACKed: %v %s", tr, tr.Message)
	}
	frozen.thaw(t)
	f.waitPublishedWith("2 other replicas: 3/3 relevant clients ACKed; weights worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Equal(t, map[string]int{"worker-b": 20}, spread(t, clientB, 20), "right after Published=True")
	assert.Equal(t, map[string]int{"worker-b": 20}, spread(t, clientC, 20), "right after Published=True")
	var reps []replicas.Replica
	require.NoError(t, json.Unmarshal([]byte(get(t, a, "/debug/replicas")), &reps))
	require.Len(t, reps, 3, "every replica reports: %v", reps)
	for _, r := range reps {
		assert.True(t, r.Live, "%v", r)
	}
	st := admin(t).run(t, "status", service, "-n", f.ns, "--publisher-url", "http://"+a.pub.HTTPAddr().String())
	require.Equal(t, 0, st.code, st.stderr)
	assert.Contains(t, st.stdout, "REPLICA        LIVE   XDS CLIENTS   UNCONFIRMED MAPS   REPORTED\n")
	for _, row := range []string{"a (this one)   true   0 ", "b              true   1 ", "c              true   2 "} {
		assert.Contains(t, st.stdout, row, "publisher status lists every replica with its clients")
	}

	// c dies (SIGKILL) while its frozen client holds the undrain back.
	frozen.freeze()
	f.setAnnotation(service, "ome.io/traffic-drain", "", true)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "replica c: ", `waiting for "frozen-c"/sotw-`)
	killed := time.Now()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	_, _ = c.cmd.Process.Wait()
	_, err = kube.CoordinationV1().Leases(f.ns).Get(context.Background(), replicas.LeaseName(haLease, "c"), metav1.GetOptions{})
	require.NoError(t, err, "a killed replica leaves its report behind")
	assert.Equal(t, metav1.ConditionFalse, published(f.getMap()).Status, "c's report has not expired yet")
	f.waitPublishedWith("weights worker-a=1, worker-b=1")
	// c's last renewal was at most a third of the duration before the kill.
	assert.GreaterOrEqual(t, time.Since(killed), haLeaseDuration-haLeaseDuration/3-500*time.Millisecond, "True only once c's report expired")
	// The frozen client, resumed, reconnects to b and ACKs there.
	moved := startFrozenClient(t, b, grpcNode("frozen-c"), mapNames(f.ns))
	require.Eventually(t, func() bool { return moved.responses() >= 3 }, waitTimeout, tick)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		d := debugXDS(t, b)
		require.Len(ct, d.Maps, 1)
		acked := strings.Join(d.Maps[0].Acked, " ")
		assert.Contains(ct, acked, "frozen-c/sotw-")
		assert.Contains(ct, acked, "grpc-b/sotw-")
	}, waitTimeout, tick)

	// The leader goes; b takes over. The unchanged map keeps its condition.
	before := *published(f.getMap())
	reconciledB := reconciles(t, regB)
	a.stop(t)
	require.Eventually(t, func() bool { return leaseHolder(t, f.ns) == "b" }, waitTimeout, tick, "b leads")
	require.Eventually(t, func() bool { return reconciles(t, regB) > reconciledB }, waitTimeout, tick, "b reconciled the map")
	assert.Equal(t, before, *published(f.getMap()), "a new leader leaves an unchanged map's condition alone")
	f.drain(seedDrain)
	f.waitPublishedWith("weights worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Equal(t, map[string]int{"worker-b": 20}, spread(t, clientB, 20))
}

// countReportWrites runs change and counts the writes of report Leases from its start until
// every report lists nothing again: those that changed a report and those that only renewed
// one.
func countReportWrites(t *testing.T, f *fixture, change func()) (changed, renewed int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := kube.CoordinationV1().Leases(f.ns).Watch(ctx, metav1.ListOptions{LabelSelector: replicas.LabelFor + "=" + haLease})
	require.NoError(t, err)
	var mu sync.Mutex
	last := map[string]string{}
	pending := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			mu.Lock()
			if prev, seen := last[l.Name]; seen {
				if prev == l.Annotations[replicas.Annotation] {
					renewed++
				} else {
					changed++
				}
			}
			last[l.Name] = l.Annotations[replicas.Annotation]
			r, err := replicas.Decode(l.Annotations[replicas.Annotation])
			pending[l.Name] = err != nil || len(r.Maps) > 0
			mu.Unlock()
		}
	}()
	change()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range pending {
			if p {
				return false
			}
		}
		return len(last) == 3
	}, waitTimeout, tick, "every report empties once the change is published")
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	return changed, renewed
}

// A replica frozen (SIGSTOP) past its report's expiry cannot fence itself: its clients stay
// connected and keep routing by what it served. The leader keeps counting it, by its last
// report, for --xds-peer-grace: a drain meanwhile stays Published False and says why, and
// turns True only once the frozen replica resumed and its client, which it fenced on
// resuming and which reconnected within the reconnect grace, ACKed the drain: so at that
// True the client routes by the drain. (Before the grace, the leader said True as
// soon as the report expired while the client still sent traffic to the drained cluster;
// the chaos run of issue 28 found it with a leader frozen past its lease.)
func TestHAFrozenReplicaCountsUntilItResumes(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "worker-a"), Weight: 1, Healthy: true},
		{Cluster: "worker-b", Endpoint: localBackend(t, "worker-b"), Weight: 1, Healthy: true},
	})
	a := startPublisherWith(t, f.publisherConfig(haReplica(f, "a", prometheus.NewRegistry()), func(c *publish.Config) {
		c.XDSPeerGrace = 10 * time.Minute // longer than any wait here: only c's resuming ends the hold
		// c fences itself on resuming (its renewals stopped), and its client reconnects with
		// gRPC's backoff (1s first): the leader's reconnect grace covers that.
		c.XDSReconnectGrace = 8 * time.Second
	}), restCfg, zaptest.NewLogger(t).Named("a"))
	f.waitPublished()
	require.Equal(t, "a", leaseHolder(t, f.ns), "a was alone")
	c := startProcessReplica(t, f, "c")
	clientC := xdsClient(t, c.addr, "grpc-c", service+"."+f.ns)
	_, err := call(clientC)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var reps []replicas.Replica
		require.NoError(ct, json.Unmarshal([]byte(scrapeText(a, "/debug/replicas")), &reps))
		require.Len(ct, reps, 2)
		assert.Equal(ct, 1, reps[1].Clients, "c reports its client")
	}, waitTimeout, tick)

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = c.cmd.Process.Signal(syscall.SIGCONT) })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var reps []replicas.Replica
		require.NoError(ct, json.Unmarshal([]byte(scrapeText(a, "/debug/replicas")), &reps))
		require.Len(ct, reps, 2)
		assert.False(ct, reps[1].Live, "c's report expired")
	}, waitTimeout, tick)
	w := f.watchPublished()
	f.drain(seedDrain)
	const held = "replica c has not reported on it yet (its report expired at"
	var cond metav1.Condition
	require.Eventually(t, func() bool {
		cond = *published(f.getMap())
		return (cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, "worker-a=0")) || strings.Contains(cond.Message, held)
	}, waitTimeout, tick, "the drain is either held for c or published")
	assert.Equal(t, 2, len(spread(t, clientC, 40)), "c's frozen client still routes to both clusters")
	require.Equal(t, metav1.ConditionFalse, cond.Status, "True while c's client routes to the drained cluster: a lie (%s)", cond.Message)
	assert.Equal(t, string(model.ReasonPublishing), cond.Reason)
	assert.Contains(t, cond.Message, "its 1 clients may still hold what it served, so it counts until")
	for _, tr := range w.transitions() {
		assert.NotEqual(t, metav1.ConditionTrue, tr.Status, "no True while c is frozen: %v %s", tr, tr.Message)
	}

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
	f.waitPublishedWith("weights worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Equal(t, map[string]int{"worker-b": 20}, spread(t, clientC, 20), "right after Published=True, c's client has the drain")
}
