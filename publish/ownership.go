package publish

import (
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// claimView is the ownership view over the caches: the lookups below, apart from the
// caches' own reads.
type claimView struct{ *caches }

// The ownership view: which claims contend for a name, read from the informer caches
// through the byHostname indexes, so a reconcile looks up the few claims on its own names
// and never scans the fleet. The decision itself is model.ResolveHostnames, pure.

// indexTrafficMapByHostname indexes a map under its gRPC name, its --host-template name
// and the names its claim journal holds (a map whose InferenceService has the annotation is
// found through that index instead; lookups check each candidate's real names).
func (c claimView) indexTrafficMapByHostname(obj any) ([]string, error) {
	tm, ok := obj.(*v1beta1.TrafficMap)
	if !ok {
		return nil, nil
	}
	keys := model.HostIndexKeys(model.GRPCName(tm.Namespace, tm.Spec.Service))
	if host, err := c.route.Hostname(httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service}); err == nil {
		keys = append(keys, model.HostIndexKeys(host)...)
	}
	for _, n := range model.JournaledNames(tm, "") {
		keys = append(keys, model.HostIndexKeys(n)...)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

func indexInferenceServiceByHostname(obj any) ([]string, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil, nil
	}
	return model.HostIndexKeys(globalHost(m)), nil
}

func indexForeignRouteByHostname(obj any) ([]string, error) {
	route, ok := obj.(*gwapiv1.HTTPRoute)
	if !ok || httproute.Managed(route) {
		return nil, nil
	}
	var keys []string
	for _, h := range route.Spec.Hostnames {
		keys = append(keys, model.HostIndexKeys(string(h))...)
	}
	return keys, nil
}

func globalHost(isvc *metav1.PartialObjectMetadata) string {
	if isvc == nil {
		return ""
	}
	return strings.TrimSpace(isvc.Annotations[v1beta1.AnnotationGlobalHost])
}

// mapClaim is tm's claim with isvc (nil when missing) supplying the annotation: its
// hostname when one can be derived and the policy lets its namespace claim it, its gRPC
// name, and the names its journal holds that count (evidence).
func (c *caches) mapClaim(tm *v1beta1.TrafficMap, isvc *metav1.PartialObjectMetadata) model.Claim {
	names := []string{model.GRPCName(tm.Namespace, tm.Spec.Service)}
	src := httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service, GlobalHost: globalHost(isvc)}
	if host, err := c.route.Hostname(src); err == nil && c.policy.Check(tm.Namespace, host) == nil {
		names = append(names, host)
	}
	ev := c.evidence(tm)
	return model.Claim{Kind: model.KindTrafficMap, Namespace: tm.Namespace, Name: tm.Name, Created: tm.CreationTimestamp.Time, Names: names,
		Journaled: ev.Journaled, Granted: ev.Granted}
}

// evidence is what tm's claim journal counts for with this publisher: the names of its
// journal (this publisher's) that the claim record grants to the map, under the claim
// policy (model.ReadJournal); before the upgrade import, the journal under the policy alone
// (model.LegacyEvidence). Another publisher's journal counts for nothing here.
func (c *caches) evidence(tm *v1beta1.TrafficMap) model.Evidence {
	if !c.claimRecords.importDone() {
		return model.LegacyEvidence(tm, c.publisher, c.policy)
	}
	return model.ReadJournal(tm, c.publisher, c.claimRecords.get(tm.Namespace, tm.Name), c.policy)
}

// byIndex lists the objects of every informer in infs whose index holds one of keys.
func byIndex(infs []cache.SharedIndexInformer, index string, keys []string) []any {
	var out []any
	for _, inf := range infs {
		for _, k := range keys {
			objs, err := inf.GetIndexer().ByIndex(index, k)
			if err == nil {
				out = append(out, objs...)
			}
		}
	}
	return out
}

// mapsNamed returns the cached maps that may claim a name overlapping name (candidates: the
// caller checks their claims).
func (c claimView) mapsNamed(name string) []*v1beta1.TrafficMap {
	keys := model.HostLookupKeys(name)
	seen := map[types.NamespacedName]bool{}
	var out []*v1beta1.TrafficMap
	add := func(tm *v1beta1.TrafficMap) {
		if k := model.KeyOf(tm); !seen[k] {
			seen[k] = true
			out = append(out, tm)
		}
	}
	for _, o := range byIndex(c.maps, indexByHostname, keys) {
		if tm, ok := o.(*v1beta1.TrafficMap); ok {
			add(tm)
		}
	}
	for _, o := range byIndex(c.isvcs, indexByHostname, keys) {
		if m, ok := o.(*metav1.PartialObjectMetadata); ok {
			for _, tm := range c.mapsIndexed(indexByService, m.Namespace, model.KeyOf(m).String()) {
				add(tm)
			}
		}
	}
	return out
}

// rivals returns the claims of the other maps that claim or journaled a name overlapping
// name, in the same scope as namespace.
func (c claimView) rivals(name, namespace string, self types.NamespacedName) []model.Claim {
	var out []model.Claim
	for _, tm := range c.mapsNamed(name) {
		if model.KeyOf(tm) == self || tm.DeletionTimestamp != nil || c.scoped && tm.Namespace != namespace {
			continue
		}
		isvc, _ := c.inferenceService(tm.Namespace, tm.Spec.Service)
		cl := c.mapClaim(tm, isvc)
		over := func(n string) bool { return model.HostnamesOverlap(n, name) }
		if slices.ContainsFunc(cl.Names, over) || slices.ContainsFunc(cl.Journaled, over) {
			out = append(out, cl)
		}
	}
	return out
}

// claims gathers what decides self's names (ResolveHostnames): the claim of every other
// map that claims or journaled a name overlapping one of self's, and of every map that
// journaled a name overlapping one such rival's unjournaled names.
func (c claimView) claims(self model.Claim) []model.Claim {
	seen := map[types.NamespacedName]bool{self.Key(): true}
	var out []model.Claim
	for _, n := range model.UniqueNames(self.Names) {
		for _, r := range c.rivals(n, self.Namespace, self.Key()) {
			if !seen[r.Key()] {
				seen[r.Key()] = true
				out = append(out, r)
			}
		}
	}
	// The holders of the rivals' unjournaled names: a rival whose claim already lost to one
	// holds nothing back (ResolveHostnames, rule 3).
	direct := len(out)
	for _, r := range out[:direct] {
		journaled := model.UniqueNames(r.Journaled)
		for _, n := range model.UniqueNames(r.Names) {
			if slices.Contains(journaled, n) {
				continue
			}
			for _, q := range c.rivals(n, self.Namespace, r.Key()) {
				if !seen[q.Key()] && len(q.Journaled) > 0 {
					seen[q.Key()] = true
					out = append(out, q)
				}
			}
		}
	}
	return out
}

// foreignClaims returns the claims of the foreign routes that contend with a route of a map
// in namespace and overlap one of names, but for adopted (nil: none), the map's own route
// that the publisher adopts from OME's publisher.
func (c claimView) foreignClaims(namespace string, names []string, adopted *types.NamespacedName) []model.Claim {
	if len(c.routes) == 0 {
		return nil
	}
	seen := map[types.NamespacedName]bool{}
	var out []model.Claim
	for _, n := range model.UniqueNames(names) {
		for _, o := range byIndex(c.routes, indexByHostname, model.HostLookupKeys(n)) {
			route, ok := o.(*gwapiv1.HTTPRoute)
			if !ok || seen[model.KeyOf(route)] || adopted != nil && model.KeyOf(route) == *adopted || !c.route.Contends(route, namespace) {
				continue
			}
			seen[model.KeyOf(route)] = true
			cl := model.Claim{Kind: model.KindHTTPRoute, Namespace: route.Namespace, Name: route.Name, Created: route.CreationTimestamp.Time}
			for _, h := range route.Spec.Hostnames {
				cl.Names = append(cl.Names, string(h))
			}
			out = append(out, cl)
		}
	}
	return out
}

// routeCreated is route's creation time, nil for nil.
func routeCreated(route *gwapiv1.HTTPRoute) *time.Time {
	if route == nil {
		return nil
	}
	t := route.CreationTimestamp.Time
	return &t
}

// contenders returns the keys of the maps whose names overlap one of names: the maps whose
// ownership may change when a claim on names appears, goes or moves.
func (c claimView) contenders(names ...string) []cache.ObjectName {
	seen := map[cache.ObjectName]bool{}
	var out []cache.ObjectName
	for _, n := range model.UniqueNames(names) {
		for _, tm := range c.mapsNamed(n) {
			key := cache.NewObjectName(tm.Namespace, tm.Name)
			if !seen[key] {
				seen[key] = true
				out = append(out, key)
			}
		}
	}
	return out
}
