package standin

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model/statusapply"
)

// omeStatus, built without the publisher's packages, is the request statusapply builds for
// the same status (the chaos harness may not import statusapply; this test may).
func TestOMEStatusAsStatusApply(t *testing.T) {
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", Generation: 3, ResourceVersion: "42"}}
	got := omeStatus(tm, "chat-global")
	cond := metav1.Condition{Type: v1beta1.ConditionPublished, Status: metav1.ConditionTrue, Reason: "Published",
		Message: `TrafficMap is published by publisher "gatewayapi"`, ObservedGeneration: 3, LastTransitionTime: *got.Status.Conditions[0].LastTransitionTime}
	want := statusapply.Apply(tm, true, 3, &v1beta1.TrafficMapGatewayRef{Group: gwapiv1.GroupName, Kind: "HTTPRoute", Namespace: "prod", Name: "chat-global"},
		&cond, &v1beta1.TrafficMapPublisherStatus{PublisherName: "gatewayapi", ClaimedTargets: []string{"v1:httproute:prod/chat-global"},
			ObservedOptionsDigest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"})
	assert.Equal(t, want, got)
}
