package httproute_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/httproute"
)

func parent(ns, name string, conds ...metav1.Condition) gwapiv1.RouteParentStatus {
	ref := gwapiv1.ParentReference{Name: gwapiv1.ObjectName(name)}
	if ns != "" {
		ref.Namespace = ptr.To(gwapiv1.Namespace(ns))
	}
	return gwapiv1.RouteParentStatus{ParentRef: ref, ControllerName: "example.com/gw", Conditions: conds}
}

func cond(typ string, status metav1.ConditionStatus, gen int64) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: "R", Message: "m", ObservedGeneration: gen}
}

func TestAcceptance(t *testing.T) {
	cfg := httproute.Config{Gateway: types.NamespacedName{Name: "global"}} // namespace defaults to the route's
	acc, res := "Accepted", "ResolvedRefs"
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	tests := []struct {
		name    string
		parents []gwapiv1.RouteParentStatus
		want    httproute.Verdict
		msg     string
	}{
		{"no status", nil, httproute.Pending, "waiting for gateway prod/global to accept route prod/chat-global generation 3"},
		{"accepted", []gwapiv1.RouteParentStatus{parent("", "global", cond(acc, T, 3), cond(res, T, 3))}, httproute.Accepted, "accepted by gateway prod/global (controller example.com/gw)"},
		{"explicit namespace", []gwapiv1.RouteParentStatus{parent("prod", "global", cond(acc, T, 3), cond(res, T, 3))}, httproute.Accepted, ""},
		{"stale generation", []gwapiv1.RouteParentStatus{parent("", "global", cond(acc, T, 2), cond(res, T, 2))}, httproute.Pending, "waiting"},
		{"resolved missing", []gwapiv1.RouteParentStatus{parent("", "global", cond(acc, T, 3))}, httproute.Pending, "waiting"},
		{"rejected", []gwapiv1.RouteParentStatus{parent("", "global", cond(acc, F, 3), cond(res, T, 3))}, httproute.Rejected, "reports Accepted=False on route prod/chat-global generation 3: R: m"},
		{"unresolved", []gwapiv1.RouteParentStatus{parent("", "global", cond(acc, T, 3), cond(res, F, 3))}, httproute.Rejected, "ResolvedRefs=False"},
		{"stale rejection ignored", []gwapiv1.RouteParentStatus{parent("", "global", cond(acc, F, 2), cond(res, T, 3))}, httproute.Pending, "waiting"},
		{"other gateway ignored", []gwapiv1.RouteParentStatus{parent("", "other", cond(acc, T, 3), cond(res, T, 3))}, httproute.Pending, "waiting"},
		{"other namespace ignored", []gwapiv1.RouteParentStatus{parent("infra", "global", cond(acc, T, 3), cond(res, T, 3))}, httproute.Pending, "waiting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			route := &gwapiv1.HTTPRoute{
				ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat-global", Generation: 3},
				Status:     gwapiv1.HTTPRouteStatus{RouteStatus: gwapiv1.RouteStatus{Parents: tc.parents}},
			}
			got := cfg.Acceptance(route)
			assert.Equal(t, tc.want, got.Verdict, got.Message)
			assert.Contains(t, got.Message, tc.msg)
		})
	}
}

// Issue 45, seen with Traefik in make e2e: Traefik writes a status entry under its own
// controllerName for every parent of a route it serves, Envoy Gateway's Gateway included.
// Read by the parent's own controller, another controller's entry is not its verdict; with
// the controller unknown, every entry for the parent must accept.
func TestAcceptanceByTheParentsController(t *testing.T) {
	cfg := httproute.Config{Gateway: types.NamespacedName{Name: "global"}}
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	by := func(controller string, s metav1.ConditionStatus) gwapiv1.RouteParentStatus {
		p := parent("", "global", cond("Accepted", T, 3), cond("ResolvedRefs", s, 3))
		p.ControllerName = gwapiv1.GatewayController(controller)
		return p
	}
	traefikOK, egRefuses := by("traefik.io/gateway-controller", T), by("gateway.envoyproxy.io/gatewayclass-controller", F)
	egPending := parent("", "global")
	egPending.ControllerName = "gateway.envoyproxy.io/gatewayclass-controller"
	tests := []struct {
		name       string
		parents    []gwapiv1.RouteParentStatus
		controller string
		want       httproute.Verdict
	}{
		{"the parent's controller refuses, another accepts", []gwapiv1.RouteParentStatus{traefikOK, egRefuses}, "gateway.envoyproxy.io/gatewayclass-controller", httproute.Rejected},
		{"only another controller has spoken", []gwapiv1.RouteParentStatus{traefikOK, egPending}, "gateway.envoyproxy.io/gatewayclass-controller", httproute.Pending},
		{"only another controller's entry", []gwapiv1.RouteParentStatus{traefikOK}, "gateway.envoyproxy.io/gatewayclass-controller", httproute.Pending},
		{"the parent's controller accepts", []gwapiv1.RouteParentStatus{traefikOK, egRefuses}, "traefik.io/gateway-controller", httproute.Accepted},
		{"unknown controller: one refuses", []gwapiv1.RouteParentStatus{traefikOK, egRefuses}, "", httproute.Rejected},
		{"unknown controller: one has not spoken", []gwapiv1.RouteParentStatus{traefikOK, egPending}, "", httproute.Pending},
		{"unknown controller: all accept", []gwapiv1.RouteParentStatus{traefikOK}, "", httproute.Accepted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			route := &gwapiv1.HTTPRoute{
				ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat-global", Generation: 3},
				Status:     gwapiv1.HTTPRouteStatus{RouteStatus: gwapiv1.RouteStatus{Parents: tc.parents}},
			}
			got := cfg.AcceptanceBy(route, tc.controller)
			assert.Equal(t, tc.want, got.Verdict, got.Message)
		})
	}
}
