package httproute

import (
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Managed reports whether route carries the publisher's managed-by label.
func Managed(route *gwapiv1.HTTPRoute) bool {
	return route.Labels[LabelManagedBy] == ManagedByValue
}

// Contends reports whether route, which the publisher does not manage, competes with a
// route the publisher would write for a map in mapNamespace: it is attached to the same
// Gateway on an overlapping listener (the same sectionName, or either side names none)
// and one of its rules matches path prefix "/" (a rule without matches does, by default).
// Its hostnames are then compared by the caller.
func (c Config) Contends(route *gwapiv1.HTTPRoute, mapNamespace string) bool {
	if Managed(route) {
		return false
	}
	attached := false
	for _, ref := range route.Spec.ParentRefs {
		if ref.Group != nil && *ref.Group != gwapiv1.GroupName || ref.Kind != nil && *ref.Kind != "Gateway" {
			continue
		}
		ns := route.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		if (types.NamespacedName{Namespace: ns, Name: string(ref.Name)}) != c.gatewayName(mapNamespace) {
			continue
		}
		if ref.SectionName == nil || *ref.SectionName == "" || c.GatewaySection == "" || string(*ref.SectionName) == c.GatewaySection {
			attached = true
			break
		}
	}
	return attached && matchesRoot(route)
}

// matchesRoot reports whether a rule of route matches path prefix "/".
func matchesRoot(route *gwapiv1.HTTPRoute) bool {
	for _, rule := range route.Spec.Rules {
		if len(rule.Matches) == 0 {
			return true
		}
		for _, m := range rule.Matches {
			if m.Path == nil || m.Path.Value == nil || *m.Path.Value == "/" &&
				(m.Path.Type == nil || *m.Path.Type == gwapiv1.PathMatchPathPrefix) {
				return true
			}
		}
	}
	return false
}
