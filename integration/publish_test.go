package integration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// S1: weights 1/1 give a route with two backendRefs 1/1 and two backend Services; Published
// turns True only after the gateway accepted the route at its generation.
func TestPublishSeedWeights(t *testing.T) {
	f := newFixture(t)
	f.gw.Pause()
	f.createMap(seedEntries())
	f.startPublisher()

	// Wait for the message itself: "publishing weights ..." (False/Publishing, written before
	// the route) comes first and lasts a few milliseconds, so a poll may see it.
	tm := f.waitCondition(metav1.ConditionFalse, "Publishing", "waiting for gateway")
	assert.Contains(t, published(tm).Message, "waiting for gateway")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))

	f.gw.Resume()
	tm = f.waitPublished()
	assert.Equal(t, tm.Generation, tm.Status.ObservedTrafficMapGeneration)
	require.NotNil(t, tm.Status.GatewayRef)
	assert.Equal(t, "HTTPRoute", tm.Status.GatewayRef.Kind)
	assert.Equal(t, "chat-global", tm.Status.GatewayRef.Name)
	assert.Contains(t, published(tm).Message, "accepted by gateway "+f.ns+"/global")

	svcs := f.ownedServices()
	require.Len(t, svcs, 2)
	hosts := []string{svcs[0].Spec.ExternalName, svcs[1].Spec.ExternalName}
	assert.ElementsMatch(t, []string{"chat.worker-a.example.com", "chat.worker-b.example.com"}, hosts)
	for _, s := range svcs {
		assert.Equal(t, corev1.ServiceTypeExternalName, s.Spec.Type)
		assert.Equal(t, int32(443), s.Spec.Ports[0].Port)
	}
	r := f.route()
	assert.Equal(t, []string{"chat." + f.ns + ".example.com"}, []string{string(r.Spec.Hostnames[0])})
}
