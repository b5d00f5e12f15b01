package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
)

func TestHolderOf(t *testing.T) {
	lp := &v1beta1.TrafficMapPublisherLastPositive{TrafficMapGeneration: 1, ObservedISVCGeneration: 1}
	tests := []struct {
		name     string
		journal  *v1beta1.TrafficMapPublisherStatus
		takeOver string
		want     Holding
	}{
		{name: "no journal", want: Holding{Hold: HoldOwn}},
		{name: "own journal", journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: "ours", ClaimedTargets: []string{"grpc:chat.prod"}},
			want: Holding{Hold: HoldOwn}},
		{name: "empty name", journal: &v1beta1.TrafficMapPublisherStatus{}, want: Holding{Hold: HoldOwn}},
		{name: "another with claims holds", journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: "b", ClaimedTargets: []string{"hostname:chat.example.com"}},
			want: Holding{Hold: HoldOther, Publisher: "b"}},
		{name: "another with a last positive plan holds", journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: "b", LastPositive: lp},
			want: Holding{Hold: HoldOther, Publisher: "b"}},
		{name: "another with neither is adopted", journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: "b", ObservedOptionsDigest: "sha256:00"},
			want: Holding{Hold: HoldAdopt, Publisher: "b"}},
		{name: "take over from the holder", journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: OMEPublisherName, ClaimedTargets: []string{"v1:httproute:prod/chat-global"}},
			takeOver: OMEPublisherName, want: Holding{Hold: HoldTakeOver, Publisher: OMEPublisherName}},
		{name: "take over from another name leaves the holder", journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: OMEPublisherName, ClaimedTargets: []string{"v1:httproute:prod/chat-global"}},
			takeOver: "c", want: Holding{Hold: HoldOther, Publisher: OMEPublisherName}},
		{name: "take over an empty journal", journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: "b"}, takeOver: "b",
			want: Holding{Hold: HoldTakeOver, Publisher: "b"}},
		{name: "an unknown publisher with claims holds, unknown", journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: "forged", ClaimedTargets: []string{"hostname:chat.example.com"}},
			want: Holding{Hold: HoldOther, Publisher: "forged", Unknown: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tm := &v1beta1.TrafficMap{Status: v1beta1.TrafficMapStatus{Publisher: tc.journal}}
			got := HolderOf(tm, Publishers{Self: "ours", TakeOverFrom: tc.takeOver, Known: []string{"b"}})
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.want.Hold == HoldOther, got.Held())
			assert.Equal(t, tc.want.Hold == HoldAdopt || tc.want.Hold == HoldTakeOver, got.Replaces())
		})
	}
}

func TestHolderSilentAndHeldStatus(t *testing.T) {
	at := func(gen int64) []metav1.Condition {
		return []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: metav1.ConditionTrue, Reason: string(ReasonPublished), ObservedGeneration: gen}}
	}
	tests := []struct {
		name   string
		conds  []metav1.Condition
		silent bool
	}{
		{name: "no condition", silent: true},
		{name: "condition of an older generation", conds: at(2), silent: true},
		{name: "condition of the current generation", conds: at(3), silent: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", Generation: 3},
				Status: v1beta1.TrafficMapStatus{Conditions: tc.conds, Published: true, ObservedTrafficMapGeneration: 2}}
			assert.Equal(t, tc.silent, HolderSilent(tm))
		})
	}
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", Generation: 3}}
	st := HeldStatus(tm, "gatewayapi", "trafficmap-publisher")
	assert.True(t, st.Held)
	assert.False(t, st.Published)
	assert.Equal(t, metav1.ConditionFalse, st.Condition.Status)
	assert.Equal(t, string(ReasonPublisherChanged), st.Condition.Reason)
	assert.Equal(t, int64(3), st.Condition.ObservedGeneration)
	assert.Contains(t, st.Condition.Message, `held by publisher "gatewayapi"`)
	assert.Contains(t, st.Condition.Message, "--take-over-from gatewayapi")
}
