package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/integration/gatewaykit"
)

// The fault "DNS answers that change" (issue 46), of the -gateways run only: the Traefik
// maps' endpoints are hostnames the harness's DNS server answers for (one per cluster,
// backendHost), and the fault changes one cluster's answer and later restores it. Each
// cluster's backend answers on two addresses (gatewaykit.StartMovableBackends), so the name
// moves between addresses that both serve that cluster, as a real DNS move leaves the old
// server up: traffic is unaffected, and the checker judges the EndpointSlices against the
// DNS server (the rule "endpointslice addresses", dnsoracle.go).
const (
	faultDNSChange = "dns answer change (endpoint hostname moved to another address, or widened to two)"
	// dnsTTL is the TTL of every record the DNS server serves.
	dnsTTL = time.Second
	// resolveMinTTL is the Traefik replicas' --resolve-min-ttl: with dnsTTL, they re-resolve
	// a name every second.
	resolveMinTTL = time.Second
	// resolveTimeout is the publisher's lookup timeout (package resolve's default; no flag).
	resolveTimeout = 5 * time.Second
	// dnsObserve bounds how long after a change of an answer the publisher may go on holding
	// the old one: the cached answer's life (the TTL clamped to --resolve-min-ttl) and one
	// lookup. Writing the EndpointSlices after that is the reconcile retractWithin bounds.
	dnsObserve = max(dnsTTL, resolveMinTTL) + resolveTimeout
	// followWithin bounds the fault's wait for the EndpointSlices to follow a change: past
	// the judge's bound for them (retractWithin plus the fault's two dnsObserve), so that a
	// publisher that never follows is caught before the restore hides it.
	followWithin = retractWithin + 2*dnsObserve + 10*time.Second
	// backendDomain is the zone of the backends' hostnames (.test is reserved for tests).
	backendDomain = "backends.chaos.test"
)

// gatewayKinds are the fault kinds of the -gateways run only, whose targets are the Traefik
// part's; a round-robin schedule takes them after faultGatewayReject.
var gatewayKinds = []string{faultDNSChange}

// backendHost is cluster's endpoint hostname in the Traefik maps.
func backendHost(cluster string) string { return cluster + "." + backendDomain }

// backendEndpoint is the endpoint URL of cluster in the Traefik maps.
func backendEndpoint(cluster string) string {
	return "http://" + net.JoinHostPort(backendHost(cluster), strconv.Itoa(gatewaykit.BackendPort))
}

// dnsTarget is what the fault changes and watches: the DNS server, each cluster's two
// addresses (home: the answer outside the fault), and the Traefik maps' EndpointSlices.
type dnsTarget struct {
	server    *dnsServer
	clusters  []string
	home, alt map[string]netip.Addr
	kube      kubernetes.Interface
	ome       omeclient.Interface
	namespace string

	mu sync.Mutex // held while a change is on: one at a time
	n  int        // changes made, under mu: they alternate between moving and widening
}

// newDNSTarget serves every cluster's hostname at its backend's first address.
func newDNSTarget(server *dnsServer, b *gatewaykit.Backends, cl clients, ns string) (*dnsTarget, error) {
	t := &dnsTarget{server: server, home: map[string]netip.Addr{}, alt: map[string]netip.Addr{}, kube: cl.kube, ome: cl.ome, namespace: ns}
	for c, a := range b.Addrs {
		home, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("backend of %s: %w", c, err)
		}
		alt, err := netip.ParseAddr(b.Alts[c])
		if err != nil {
			return nil, fmt.Errorf("second backend of %s: %w", c, err)
		}
		t.home[c], t.alt[c] = home, alt
		t.clusters = append(t.clusters, c)
		server.Set(backendHost(c), home)
	}
	slices.Sort(t.clusters)
	return t, nil
}

// dnsChange changes one cluster's answer (by pick), in turn moving the name to the
// cluster's other address and widening it to both; after d (and the EndpointSlices'
// following, which it waits for up to followWithin) it restores the home address. It
// reports how long the slices took to follow each change. A change under way makes it do
// nothing ("").
func (t *dnsTarget) dnsChange(ctx context.Context, d time.Duration, pick int) (string, error) {
	if !t.mu.TryLock() {
		return "", nil
	}
	defer t.mu.Unlock()
	c := t.clusters[pick%len(t.clusters)]
	host := backendHost(c)
	changed, how := []netip.Addr{t.alt[c]}, "moved"
	if t.n%2 == 1 {
		changed, how = []netip.Addr{t.home[c], t.alt[c]}, "widened"
	}
	t.n++
	start := time.Now()
	t.server.Set(host, changed...)
	first := t.follow(ctx, c, changed)
	sleep(ctx, d-time.Since(start))
	t.server.Set(host, t.home[c])
	back := t.follow(ctx, c, []netip.Addr{t.home[c]})
	return fmt.Sprintf("%s %s %s to %s for %s: %s; restored to %s: %s", host, how, t.home[c], addrList(changed),
		time.Since(start).Round(time.Millisecond), first, t.home[c], back), nil
}

// follow waits up to followWithin until the EndpointSlices of cluster c's Services of every
// Traefik map standing Published True hold exactly want, and says after how long (or which
// did not). A map not True is not held to it: with a malformed input (InvalidRampAnnotation,
// ...) the sinks keep what they published (docs/concepts/published.md).
func (t *dnsTarget) follow(ctx context.Context, c string, want []netip.Addr) string {
	start := time.Now()
	wantText := make([]string, len(want))
	for i, a := range want {
		wantText[i] = a.String()
	}
	var have int
	var stale []string
	var err error
	for {
		have, stale, err = t.sliceState(ctx, c, wantText)
		// No map standing True with the cluster yet (a spec change under way): wait for one,
		// or a publisher that never follows would end the wait unseen.
		if (err == nil && have > 0 && len(stale) == 0) || time.Since(start) > followWithin || ctx.Err() != nil {
			break
		}
		sleep(ctx, 100*time.Millisecond)
	}
	switch {
	case err != nil:
		return fmt.Sprintf("endpointslices unread within %s: %v", followWithin, err)
	case len(stale) > 0:
		return fmt.Sprintf("%d of %d services' endpointslices not following within %s (%s)", len(stale), have, followWithin, strings.Join(stale, ", "))
	case have == 0:
		return fmt.Sprintf("no map standing True served the cluster within %s", followWithin)
	}
	return fmt.Sprintf("endpointslices of %d services (maps standing True) followed after %s", have, time.Since(start).Round(10*time.Millisecond))
}

// sliceState counts cluster c's Services with the publisher's EndpointSlices, of the maps
// standing True, and lists, sorted, those whose ready addresses are not want, with what
// they hold.
func (t *dnsTarget) sliceState(ctx context.Context, c string, want []string) (services int, stale []string, err error) {
	maps, err := t.ome.OmeV1beta1().TrafficMaps(t.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, nil, fmt.Errorf("list trafficmaps: %w", err)
	}
	standing := map[string]bool{}
	for _, tm := range maps.Items {
		if p, ok := published(&tm); ok && p.Status == metav1.ConditionTrue && p.ObservedGeneration == tm.Generation {
			standing[tm.Name] = true
		}
	}
	list, err := t.kube.DiscoveryV1().EndpointSlices(t.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labelSliceManagedBy + "=" + sliceManagedBy + "," + labelCluster + "=" + c})
	if err != nil {
		return 0, nil, fmt.Errorf("list endpointslices: %w", err)
	}
	got := sliceAddresses{}
	for i := range list.Items {
		if standing[list.Items[i].Labels[labelSourceName]] {
			got.addSlice(&list.Items[i])
		}
	}
	for svc, addrs := range got {
		if !slices.Equal(addrs, want) {
			stale = append(stale, fmt.Sprintf("%s holds [%s]", svc, strings.Join(addrs, " ")))
		}
	}
	slices.Sort(stale)
	return len(got), stale, nil
}

// dnsOutage is how long from t on the publisher may go on serving answers of the DNS server
// that changed: dnsObserve for every change of an answer within [t, t+within] (a "dns
// answer change" injection changes twice).
func (f *faults) dnsOutage(t time.Time, within time.Duration) time.Duration {
	var d time.Duration
	for _, in := range f.Log() {
		if in.Kind == faultDNSChange && !in.Start.After(t.Add(within)) && !in.End.Before(t) {
			d += 2 * dnsObserve
		}
	}
	return d
}

// traefikOutage is the outage bound of the Traefik maps: the run's (outage) plus the DNS
// changes' (dnsOutage).
func (f *faults) traefikOutage(t time.Time, within time.Duration) time.Duration {
	return f.outage(t, within) + f.dnsOutage(t, within)
}

// scheduleKinds are the kinds the schedule picks from at random and the round-robin order:
// faultKinds and roundRobinKinds, with gatewayKinds when their target is there.
func (f *faults) scheduleKinds() (random, roundRobin []string) {
	if f.dns == nil {
		return faultKinds, roundRobinKinds
	}
	random = slices.Concat(faultKinds, gatewayKinds)
	at := slices.Index(roundRobinKinds, faultGatewayReject) + 1
	roundRobin = slices.Concat(roundRobinKinds[:at], gatewayKinds, roundRobinKinds[at:])
	return random, roundRobin
}

// reportKinds are the kinds the report lists: faultKinds, with gatewayKinds in a -gateways
// run.
func reportKinds(gateways bool) []string {
	if gateways {
		return slices.Concat(faultKinds, gatewayKinds)
	}
	return faultKinds
}

// addrList renders addresses space-separated.
func addrList(addrs []netip.Addr) string {
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = a.String()
	}
	return strings.Join(parts, " ")
}
