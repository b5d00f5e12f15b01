package main

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// The rule "endpointslice addresses" (the "dns answer change" fault): a map standing
// Published True claims its gateway serves each entry at the addresses its endpoint's
// hostname resolves to. With the endpointslice backend kind (docs/reference/backends.md)
// those are the ready endpoints of the EndpointSlices of the entry's Service (label
// kubernetes.io/service-name); the expected addresses come from the harness's DNS server
// (dnsServer.Lookup), never from the publisher's resolver.
const (
	// labelServiceName is Kubernetes' label naming an EndpointSlice's Service.
	labelServiceName = discoveryv1.LabelServiceName
	// labelSliceManagedBy and sliceManagedBy mark the publisher's EndpointSlices
	// (docs/reference/backends.md, endpointslice).
	labelSliceManagedBy = discoveryv1.LabelManagedBy
	sliceManagedBy      = "publisher.trafficmap.dev"
	// ruleSliceAddresses is the rule's name, the start of its problems.
	ruleSliceAddresses = "endpointslice addresses"
)

// sliceAddresses are the ready addresses of EndpointSlices by their Service's name, each
// list sorted and without duplicates. Traefik serves only endpoints with conditions.ready
// true (docs/reference/backends.md), so an endpoint without it serves nothing.
type sliceAddresses map[string][]string

// addSlice adds the ready addresses of s under its Service's name.
func (sa sliceAddresses) addSlice(s *discoveryv1.EndpointSlice) {
	svc := s.Labels[labelServiceName]
	if svc == "" {
		return
	}
	addrs := sa[svc]
	for _, e := range s.Endpoints {
		if e.Conditions.Ready == nil || !*e.Conditions.Ready {
			continue
		}
		for _, a := range e.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				a = ip.Unmap().String()
			}
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	sa[svc] = slices.Compact(addrs)
}

// slicesOf collects the publisher's EndpointSlices of namespace ns from stores.
func slicesOf(stores []cache.Store, ns string) sliceAddresses {
	out := sliceAddresses{}
	for _, s := range stores {
		for _, o := range s.List() {
			es := o.(*discoveryv1.EndpointSlice)
			if es.Namespace == ns && es.Labels[labelSliceManagedBy] == sliceManagedBy {
				out.addSlice(es)
			}
		}
	}
	return out
}

// judgeSliceAddresses is the rule: for every backendRef of the map's route (st.route) that
// names one of its Services (st.clusters), whose entry's endpoint host is an IP address or
// a name dns answers for, the Service's ready slice addresses (st.slices) are exactly that
// address or answer. Hosts dns does not know are not judged (not this rule's to say); nil
// dns: the rule is off.
func judgeSliceAddresses(tm *v1beta1.TrafficMap, st stateAt, dns func(string) ([]string, bool)) []string {
	if st.route == nil || dns == nil {
		return nil
	}
	endpoints := map[string]string{} // cluster -> endpoint host
	for _, e := range tm.Spec.Entries {
		if u, err := url.Parse(e.Endpoint); err == nil {
			endpoints[e.Cluster] = u.Hostname()
		}
	}
	var problems []string
	seen := map[string]bool{}
	for _, rule := range st.route.Spec.Rules {
		for _, b := range rule.BackendRefs {
			svc := string(b.Name)
			cluster, ok := st.clusters[svc]
			host, hasEntry := endpoints[cluster]
			if !ok || !hasEntry || host == "" || seen[svc] {
				continue
			}
			seen[svc] = true
			want, known := expectedAddresses(host, dns)
			if !known {
				continue
			}
			if have := st.slices[svc]; !slices.Equal(have, want) {
				problems = append(problems, fmt.Sprintf("%s: service %s (entry %s, host %s) has ready addresses [%s], the dns answer is [%s]",
					ruleSliceAddresses, svc, cluster, host, strings.Join(have, " "), strings.Join(want, " ")))
			}
		}
	}
	return problems
}

// expectedAddresses is what a Service of an endpoint with host must serve: the address
// itself for an IP literal, else dns's answer; false when dns does not know the name.
func expectedAddresses(host string, dns func(string) ([]string, bool)) ([]string, bool) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []string{ip.Unmap().String()}, true
	}
	want, ok := dns(host)
	if !ok {
		return nil, false
	}
	want = slices.Clone(want)
	slices.Sort(want)
	return slices.Compact(want), true
}
