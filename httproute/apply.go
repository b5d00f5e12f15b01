package httproute

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapplyv1 "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"
)

// The apply configurations below carry exactly the fields Build sets: with server-side
// apply a field left out is a field given up, so nothing Build sets may be missing here
// (TestApplyConfigurationsCarryEveryBuiltField checks this for every golden case).

// routeApply returns the apply configuration for a route built by Build. A non-empty uid
// makes the apply fail instead of touching another object at the same name.
func routeApply(route *gwapiv1.HTTPRoute, uid types.UID) *gwapplyv1.HTTPRouteApplyConfiguration {
	spec := gwapplyv1.HTTPRouteSpec().WithHostnames(route.Spec.Hostnames...)
	for _, ref := range route.Spec.ParentRefs {
		spec.WithParentRefs(parentRefApply(ref))
	}
	for _, rule := range route.Spec.Rules {
		spec.WithRules(ruleApply(rule))
	}
	ac := gwapplyv1.HTTPRoute(route.Name, route.Namespace).
		WithLabels(route.Labels).
		WithAnnotations(route.Annotations).
		WithOwnerReferences(ownerReferencesApply(route.OwnerReferences)...).
		WithSpec(spec)
	if uid != "" {
		ac.WithUID(uid)
	}
	return ac
}

func parentRefApply(ref gwapiv1.ParentReference) *gwapplyv1.ParentReferenceApplyConfiguration {
	ac := gwapplyv1.ParentReference().WithName(ref.Name)
	if ref.Group != nil {
		ac.WithGroup(*ref.Group)
	}
	if ref.Kind != nil {
		ac.WithKind(*ref.Kind)
	}
	if ref.Namespace != nil {
		ac.WithNamespace(*ref.Namespace)
	}
	if ref.SectionName != nil {
		ac.WithSectionName(*ref.SectionName)
	}
	if ref.Port != nil {
		ac.WithPort(*ref.Port)
	}
	return ac
}

func ruleApply(rule gwapiv1.HTTPRouteRule) *gwapplyv1.HTTPRouteRuleApplyConfiguration {
	ac := gwapplyv1.HTTPRouteRule()
	for _, m := range rule.Matches {
		match := gwapplyv1.HTTPRouteMatch()
		if m.Path != nil {
			path := gwapplyv1.HTTPPathMatch()
			if m.Path.Type != nil {
				path.WithType(*m.Path.Type)
			}
			if m.Path.Value != nil {
				path.WithValue(*m.Path.Value)
			}
			match.WithPath(path)
		}
		ac.WithMatches(match)
	}
	for _, ref := range rule.BackendRefs {
		b := gwapplyv1.HTTPBackendRef().WithName(ref.Name)
		if ref.Group != nil {
			b.WithGroup(*ref.Group)
		}
		if ref.Kind != nil {
			b.WithKind(*ref.Kind)
		}
		if ref.Namespace != nil {
			b.WithNamespace(*ref.Namespace)
		}
		if ref.Port != nil {
			b.WithPort(*ref.Port)
		}
		if ref.Weight != nil {
			b.WithWeight(*ref.Weight)
		}
		for _, f := range ref.Filters {
			filter := gwapplyv1.HTTPRouteFilter().WithType(f.Type)
			if f.URLRewrite != nil && f.URLRewrite.Hostname != nil {
				filter.WithURLRewrite(gwapplyv1.HTTPURLRewriteFilter().WithHostname(*f.URLRewrite.Hostname))
			}
			b.WithFilters(filter)
		}
		ac.WithBackendRefs(b)
	}
	return ac
}

// serviceApply returns the apply configuration for a Service built by Build. A non-empty
// uid makes the apply fail instead of touching another object at the same name.
func serviceApply(svc *corev1.Service, uid types.UID) *corev1ac.ServiceApplyConfiguration {
	spec := corev1ac.ServiceSpec().WithType(svc.Spec.Type)
	if svc.Spec.ExternalName != "" {
		spec.WithExternalName(svc.Spec.ExternalName)
	}
	for _, p := range svc.Spec.Ports {
		spec.WithPorts(corev1ac.ServicePort().WithName(p.Name).WithProtocol(p.Protocol).WithPort(p.Port))
	}
	ac := corev1ac.Service(svc.Name, svc.Namespace).
		WithLabels(svc.Labels).
		WithOwnerReferences(ownerReferencesApply(svc.OwnerReferences)...).
		WithSpec(spec)
	if uid != "" {
		ac.WithUID(uid)
	}
	return ac
}

// endpointSliceApply returns the apply configuration for an EndpointSlice built by Build.
// A non-empty uid makes the apply fail instead of touching another object at the same name.
func endpointSliceApply(slice *discoveryv1.EndpointSlice, uid types.UID) *discoveryv1ac.EndpointSliceApplyConfiguration {
	ac := discoveryv1ac.EndpointSlice(slice.Name, slice.Namespace).
		WithLabels(slice.Labels).
		WithOwnerReferences(ownerReferencesApply(slice.OwnerReferences)...).
		WithAddressType(slice.AddressType)
	for _, e := range slice.Endpoints {
		ep := discoveryv1ac.Endpoint().WithAddresses(e.Addresses...)
		if e.Conditions.Ready != nil {
			ep.WithConditions(discoveryv1ac.EndpointConditions().WithReady(*e.Conditions.Ready))
		}
		ac.WithEndpoints(ep)
	}
	for _, p := range slice.Ports {
		port := discoveryv1ac.EndpointPort()
		if p.Name != nil {
			port.WithName(*p.Name)
		}
		if p.Protocol != nil {
			port.WithProtocol(*p.Protocol)
		}
		if p.Port != nil {
			port.WithPort(*p.Port)
		}
		ac.WithPorts(port)
	}
	if uid != "" {
		ac.WithUID(uid)
	}
	return ac
}

// ownerReferencesApply returns the apply configurations of refs, with exactly the fields
// they set (controller and blockOwnerDeletion only when set).
func ownerReferencesApply(refs []metav1.OwnerReference) []*metav1ac.OwnerReferenceApplyConfiguration {
	out := make([]*metav1ac.OwnerReferenceApplyConfiguration, 0, len(refs))
	for _, r := range refs {
		ac := metav1ac.OwnerReference().WithAPIVersion(r.APIVersion).WithKind(r.Kind).WithName(r.Name).WithUID(r.UID)
		if r.Controller != nil {
			ac.WithController(*r.Controller)
		}
		if r.BlockOwnerDeletion != nil {
			ac.WithBlockOwnerDeletion(*r.BlockOwnerDeletion)
		}
		out = append(out, ac)
	}
	return out
}
