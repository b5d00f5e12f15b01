package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
)

func TestReasons(t *testing.T) {
	seen := map[Reason]bool{}
	for _, r := range Reasons() {
		assert.False(t, seen[r], "%s listed twice", r)
		seen[r] = true
		assert.NotEmpty(t, string(r))
	}
	assert.Len(t, seen, 22)
	for r, normal := range map[Reason]bool{ReasonPublished: true, ReasonPublishing: true, ReasonRamping: true, ReasonFinalizing: true, ReasonRetiringDisabledSink: true,
		ReasonXDSRejected: false, ReasonHostnameConflict: false, ReasonInvalidTrafficMap: false} {
		assert.Equal(t, normal, r.Normal(), r)
	}
}

func TestKeys(t *testing.T) {
	p := &Plan{Namespace: "prod", Name: "chat"}
	assert.Equal(t, types.NamespacedName{Namespace: "prod", Name: "chat"}, p.Key())
	assert.Equal(t, "prod/chat", p.Key().String(), "the informer caches' key format")
	assert.Equal(t, p.Key(), Key("prod", "chat"))
	assert.Equal(t, p.Key(), Claim{Namespace: "prod", Name: "chat"}.Key())
}
