package drain

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

func publishedMap(status metav1.ConditionStatus, since time.Time) *v1beta1.TrafficMap {
	return &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "prod", Generation: 3, ResourceVersion: "41"},
		Spec:       v1beta1.TrafficMapSpec{Service: "chat"},
		Status: v1beta1.TrafficMapStatus{Published: status == metav1.ConditionTrue, ObservedTrafficMapGeneration: 3,
			GatewayRef: &v1beta1.TrafficMapGatewayRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: "chat-global"},
			Conditions: []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: status, Reason: string(model.ReasonPublished),
				Message: "old", ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(since)}}},
	}
}

// The flip is the publisher's apply with published false and the Publishing condition:
// observedTrafficMapGeneration and gatewayRef as they are, at the read resourceVersion.
func TestFlipConfiguration(t *testing.T) {
	since := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	now := since.Add(time.Hour + 300*time.Millisecond) // stored in whole seconds
	tg := TargetOf(seedObject())
	p, err := Prepare(seedDrain, tg)
	require.NoError(t, err)

	tm := publishedMap(metav1.ConditionTrue, since)
	cond := publishingCondition(tm, PublishingMessage(p), now)
	assert.Equal(t, metav1.Condition{Type: v1beta1.ConditionPublished, Status: metav1.ConditionFalse, Reason: string(model.ReasonPublishing),
		Message: "publisher drain of maintenance-a on worker-a requested; not yet published", ObservedGeneration: 3,
		LastTransitionTime: metav1.NewTime(since.Add(time.Hour))}, cond)
	b, err := json.Marshal(FlipConfiguration(tm, cond))
	require.NoError(t, err)
	assert.JSONEq(t, `{"kind":"TrafficMap","apiVersion":"ome.io/v1beta1","metadata":{"name":"chat","namespace":"prod","resourceVersion":"41"},
		"status":{"published":false,"gatewayRef":{"group":"gateway.networking.k8s.io","kind":"HTTPRoute","name":"chat-global"},
		"observedTrafficMapGeneration":3,"conditions":[{"type":"Published","status":"False","observedGeneration":3,
		"lastTransitionTime":"2026-12-03T11:00:00Z","reason":"Publishing","message":"publisher drain of maintenance-a on worker-a requested; not yet published"}]}}`, string(b))

	// Already False: the transition time stays (meta.SetStatusCondition's rule).
	cond = publishingCondition(publishedMap(metav1.ConditionFalse, since), PublishingMessage(p), now)
	assert.Equal(t, metav1.NewTime(since), cond.LastTransitionTime)
	assert.True(t, Flip{Condition: cond}.Written())
	assert.False(t, Flip{}.Written())
}

// The flip is applied under the field manager of the publisher whose claim journal holds the
// map, so that publisher's next status write replaces it.
func TestFlipManager(t *testing.T) {
	for _, tc := range []struct {
		name, holder, want string
	}{
		{"no journal", "", "trafficmap-publisher"},
		{"default publisher", "trafficmap-publisher", "trafficmap-publisher"},
		{"named publisher", "pub-a", "trafficmap-publisher/pub-a"},
		{"ome's publisher", model.OMEPublisherName, "trafficmap-publisher"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := &v1beta1.TrafficMap{}
			if tc.holder != "" {
				tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: tc.holder}
			}
			assert.Equal(t, tc.want, flipManager(tm))
		})
	}
}
