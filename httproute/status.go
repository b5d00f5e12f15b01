package httproute

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Verdict is what the parent Gateway's controller has said about the route's current
// generation.
type Verdict int

// Verdicts, from the route's status.parents entry for the configured Gateway.
const (
	// Pending: no controller has reported on the current generation yet.
	Pending Verdict = iota
	// Accepted: Accepted=True and ResolvedRefs=True at the route's generation.
	Accepted
	// Rejected: Accepted or ResolvedRefs is False at the route's generation.
	Rejected
)

// Acceptance is the parent Gateway's verdict on a stored route, with a message for humans.
type Acceptance struct {
	Verdict Verdict
	Message string
	// Controller is the controllerName of the status entry the verdict comes from ("" while
	// Pending).
	Controller string
}

// Acceptance reads the route's status for the configured parent when the parent's
// GatewayClass controllerName is not known: see AcceptanceBy.
func (c Config) Acceptance(route *gwapiv1.HTTPRoute) Acceptance { return c.AcceptanceBy(route, "") }

// AcceptanceBy reads the route's status for the configured parent as written by controller,
// the controllerName of the parent Gateway's GatewayClass: another controller's entry for the
// same parent (Traefik, for one, writes an entry for every parent of a route it serves,
// whichever class the parent has) is not its verdict and is ignored. With controller ""
// (the class is not known) every entry naming the parent counts: the route is Accepted only
// when all of them accept it, and Rejected when any rejects it. Conditions whose
// observedGeneration is not the route's generation are ignored, as the Gateway API status
// contract requires.
func (c Config) AcceptanceBy(route *gwapiv1.HTTPRoute, controller string) Acceptance {
	gw := c.gatewayName(route.Namespace)
	rt := types.NamespacedName{Namespace: route.Namespace, Name: route.Name}
	var accepted *Acceptance
	pending := false
	for _, p := range route.Status.Parents {
		if !c.sameParent(p.ParentRef, route.Namespace) || (controller != "" && string(p.ControllerName) != controller) {
			continue
		}
		acc, res := current(p.Conditions, string(gwapiv1.RouteConditionAccepted), route.Generation),
			current(p.Conditions, string(gwapiv1.RouteConditionResolvedRefs), route.Generation)
		for _, cond := range []*metav1.Condition{acc, res} {
			if cond != nil && cond.Status == metav1.ConditionFalse {
				return Acceptance{Rejected, fmt.Sprintf("gateway %s (controller %s) reports %s=False on route %s generation %d: %s: %s",
					gw, p.ControllerName, cond.Type, rt, route.Generation, cond.Reason, cond.Message), string(p.ControllerName)}
			}
		}
		if acc == nil || res == nil || acc.Status != metav1.ConditionTrue || res.Status != metav1.ConditionTrue {
			pending = true
			continue
		}
		if accepted == nil {
			accepted = &Acceptance{Accepted, fmt.Sprintf("route %s generation %d accepted by gateway %s (controller %s)",
				rt, route.Generation, gw, p.ControllerName), string(p.ControllerName)}
		}
	}
	if accepted != nil && !pending {
		return *accepted
	}
	waiting := "gateway " + gw.String()
	if controller != "" {
		waiting += " (controller " + controller + ")"
	}
	return Acceptance{Verdict: Pending, Message: fmt.Sprintf("waiting for %s to accept route %s generation %d (Accepted and ResolvedRefs)",
		waiting, rt, route.Generation)}
}

func current(conds []metav1.Condition, typ string, generation int64) *metav1.Condition {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil || c.ObservedGeneration != generation {
		return nil
	}
	return c
}

func (c Config) gatewayName(routeNamespace string) types.NamespacedName {
	ns := c.Gateway.Namespace
	if ns == "" {
		ns = routeNamespace
	}
	return types.NamespacedName{Namespace: ns, Name: c.Gateway.Name}
}

// sameParent reports whether ref names the configured Gateway (group and kind defaulting to
// Gateway API's Gateway, namespace to the route's).
func (c Config) sameParent(ref gwapiv1.ParentReference, routeNamespace string) bool {
	if ref.Group != nil && *ref.Group != gwapiv1.GroupName {
		return false
	}
	if ref.Kind != nil && *ref.Kind != "Gateway" {
		return false
	}
	ns := routeNamespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	if (types.NamespacedName{Namespace: ns, Name: string(ref.Name)}) != c.gatewayName(routeNamespace) {
		return false
	}
	section := ""
	if ref.SectionName != nil {
		section = string(*ref.SectionName)
	}
	return section == c.GatewaySection
}
