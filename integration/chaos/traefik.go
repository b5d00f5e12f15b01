package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/integration/gatewaykit"
)

// The Traefik part of the run (-gateways DIR): a real data plane next to the stand-in. A
// publisher replica has one parent Gateway, so a second set of replicas ("t1", "t2", their
// own election Lease) watches only nsTraefik and publishes HTTPRoutes to Traefik's Gateway
// there, with backend kind auto (EndpointSlices of the backends' IP addresses for Traefik)
// and --require-xds-ack=false: no xDS client subscribes to these maps, and Published would
// wait for one forever. Its maps'
// endpoints are the backends' hostnames (backendEndpoint), which the harness's DNS server
// answers for and the replicas resolve through it (their own resolv.conf in a mount
// namespace; dnsfault.go, dnsserver.go, mountns.go); their own workload drains, undrains, tolerates, ramps,
// renames, deletes and breaks them (no taints: those are fleet-wide and the main workload's,
// and they reach these maps too; no rival maps).
const (
	nsTraefik         = "chaos-traefik"
	traefikGateway    = "traefik"
	traefikElectionID = "chaos-publisher-traefik"
)

// traefikKinds are the operations of the Traefik maps' workload.
var traefikKinds = []string{"drain", "undrain", "routing", "tolerate", "hostname", "delete", "recreate", "bad-input", "fix", "ramp"}

// traefikScene is the Traefik part's processes and judges.
type traefikScene struct {
	backends *gatewaykit.Backends
	dnsSrv   *dnsServer
	dns      *dnsTarget // the "dns answer change" fault's target
	traefik  *gatewaykit.Traefik
	replicas *replicaSet
	work     *workload
	chk      *checker // the checker's invariants on the Traefik maps, with Traefik's Gateway
	judge    *trafficJudge
}

// traefikSetup is what startTraefik needs of the run.
type traefikSetup struct {
	opts    options
	cp      *controlPlane
	cl      clients
	bin     string
	pk      *pki
	workDir string
	rng     *rand.Rand
	lag     func(time.Time) time.Duration
	logf    func(string, ...any)
}

// startTraefik starts the backends, Traefik, its Gateway, the Traefik maps and their
// replicas; on an error what was started is stopped.
func startTraefik(ctx context.Context, s traefikSetup) (_ *traefikScene, err error) {
	o := s.opts
	bin, err := gatewaykit.Binary(o.gateways, "traefik")
	if err != nil {
		return nil, err
	}
	ts := &traefikScene{}
	defer func() {
		if err != nil {
			ts.Stop()
		}
	}()
	clusters := make([]string, o.clusters)
	for j := range clusters {
		clusters[j] = clusterName(j)
	}
	if ts.backends, err = gatewaykit.StartMovableBackends(clusters...); err != nil {
		return nil, fmt.Errorf("backends: %w", err)
	}
	if ts.dnsSrv, err = startDNSServer(dnsTTL); err != nil {
		return nil, err
	}
	if ts.dns, err = newDNSTarget(ts.dnsSrv, ts.backends, s.cl, nsTraefik); err != nil {
		return nil, err
	}
	resolvConf, err := ts.dnsSrv.resolvConf(s.workDir)
	if err != nil {
		return nil, err
	}
	_, err = s.cl.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsTraefik}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", nsTraefik, err)
	}
	if ts.traefik, err = gatewaykit.StartTraefik(bin, s.cp.Kubeconfig(), nsTraefik, filepath.Join(s.workDir, "traefik.log")); err != nil {
		return nil, err
	}
	if err := traefikGatewayUp(ctx, s.cl, ts.traefik.Port); err != nil {
		return nil, fmt.Errorf("%w (traefik log: %s)", err, ts.traefik.Proc.LogPath())
	}
	ts.work = newWorkload(workloadConfig{Kube: s.cl.kube, Dynamic: s.cl.dyn, OME: s.cl.ome, Namespace: nsTraefik, Rival: nsTraefik + "-rival",
		Maps: o.traefikMaps, Clusters: o.clusters, RNG: rand.New(rand.NewPCG(s.rng.Uint64(), s.rng.Uint64())), Bin: s.bin, Kubeconfig: s.cp.Kubeconfig(),
		Endpoint: func(_, cluster string) string { return backendEndpoint(cluster) }, Kinds: traefikKinds})
	if err := ts.work.Setup(ctx); err != nil {
		return nil, fmt.Errorf("traefik workload setup: %w", err)
	}
	s.logf("starting 2 publisher replicas for the %d maps of %s on Traefik %s (%s)", o.traefikMaps, nsTraefik, gatewaykit.TraefikVersion, ts.traefik.Addr)
	ts.replicas, err = startReplicas(ctx, s.cp, replicaOptions{Bin: s.bin, WorkDir: s.workDir, Namespaces: []string{nsTraefik},
		Gateway: nsTraefik + "/" + traefikGateway, LeaseNamespace: nsLease, PKI: s.pk,
		Names: []string{"t1", "t2"}, ElectionID: traefikElectionID, ResolvConf: resolvConf,
		Extra: []string{"--require-xds-ack=false", "--backend-kind", "auto", "--route-settle", "auto", "--resolve-min-ttl", resolveMinTTL.String()}})
	if err != nil {
		return nil, fmt.Errorf("traefik replicas: %w", err)
	}
	ts.chk = newChecker(checkerConfig{OME: s.cl.ome, Kube: s.cl.kube, Gateway: s.cl.gw, Dynamic: s.cl.dyn,
		Namespaces: []string{nsTraefik}, GatewayNS: nsTraefik, GatewayName: traefikGateway, HostTemplate: hostTmpl, IPEndpoints: true, DNS: ts.dnsSrv.Lookup,
		Probes: func() []*probe { return nil }, ProbeMaps: func(*probe, string) bool { return false }, Lag: s.lag, Logf: s.logf})
	if err := ts.chk.Start(ctx); err != nil {
		return nil, err
	}
	ts.judge = newTrafficJudge(ts.chk, nsTraefik, ts.traefik.Addr, s.logf)
	if err := ts.judge.Start(ctx, ts.work.Maps()); err != nil {
		return nil, err
	}
	return ts, nil
}

// traefikGatewayUp creates Traefik's GatewayClass and the Gateway on its entry point's port
// and waits until Traefik has programmed it.
func traefikGatewayUp(ctx context.Context, cl clients, port int) error {
	class := "chaos-traefik"
	if err := gatewaykit.CreateGatewayClass(ctx, cl.gw, class, gatewaykit.TraefikController); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := gatewaykit.CreateGateway(ctx, cl.gw, nsTraefik, traefikGateway, class, port); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return gatewaykit.WaitGatewayCondition(ctx, cl.gw, nsTraefik, traefikGateway, "Programmed")
}

// opEvery is the Traefik workload's period: the run's -op-every, but no oftener than one
// operation on each map every 8 s on average, so that the maps stand True (after Traefik's
// 3 s route settle) long enough between changes to be judged.
func (ts *traefikScene) opEvery(o options) time.Duration {
	return max(o.opEvery, 8*time.Second/time.Duration(max(o.traefikMaps, 1)))
}

// Stop stops the request loops, the replicas, Traefik and the backends (whichever were
// started).
func (ts *traefikScene) Stop() {
	if ts.judge != nil {
		ts.judge.Stop()
	}
	if ts.replicas != nil {
		ts.replicas.Stop()
	}
	if ts.traefik != nil {
		ts.traefik.Proc.Stop()
	}
	if ts.dnsSrv != nil {
		ts.dnsSrv.Close()
	}
	if ts.backends != nil {
		ts.backends.Close()
	}
}
