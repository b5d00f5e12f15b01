package httproute_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// TestRetiringSink: the HTTPRoute sink wrote the undrained route; with it turned off, the
// retiring sink sets that route to the drained weights and keeps it (Pending,
// RetiringDisabledSink, naming it) until the gateway accepted that generation, then removes
// it with its Services. It never says InPlace while the live route carries other weights,
// and a cache still holding the removed route neither writes it again nor counts it.
func TestRetiringSink(t *testing.T) {
	gw := gwfake.NewClientset()
	api := &routeAPI{}
	api.install(gw)
	kube := kubefake.NewClientset()
	svcAPI := &serviceAPI{live: map[string]*corev1.Service{}}
	svcAPI.install(kube)
	store := &delayedStore{api: api, svcAPI: svcAPI}
	writer := httproute.NewWriter(kube, gw, "trafficmap-publisher")
	sc := httproute.SinkConfig{Route: cfg, RequireAccepted: true}

	undrained := plan(t)
	drained := plan(t, weights.Drain{ID: "m-a", Cluster: "worker-a", Reason: "maintenance"})
	_, err := httproute.NewSink(sc, writer, store).Apply(t.Context(), undrained, model.Standing{})
	require.NoError(t, err)
	api.accept()
	store.deliver()
	require.NotEmpty(t, svcAPI.names())

	// Turned off: the Gateway is not configured; the stored route keeps its parent.
	off := sc
	off.Route.Gateway.Name = ""
	s := httproute.NewRetiringSink(off, writer, store)
	assert.False(t, s.Carries(drained), "a stored route is not carried")
	assert.Nil(t, s.Check(drained))

	c, err := s.Apply(t.Context(), drained, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State)
	assert.Equal(t, model.ReasonRetiringDisabledSink, c.Reason)
	assert.Contains(t, c.Message, "prod/chat-global")
	live, _ := httproute.RouteWeights(api.get())
	assert.Equal(t, planWeights(t, drained), live, "the route is set to the map's weights first")
	assert.Equal(t, cfg.Gateway.Name, string(api.get().Spec.ParentRefs[0].Name), "its parent is kept")

	store.deliver()
	c, err = s.Apply(t.Context(), drained, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State, "not accepted yet: kept")
	require.NotNil(t, api.get())

	api.accept()
	c, err = s.Apply(t.Context(), drained, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State)
	assert.Nil(t, api.get(), "removed once accepted")
	assert.Empty(t, svcAPI.names(), "with its Services")

	// The cache still holds the removed route (it was delivered before the removal).
	assert.True(t, s.Carries(drained), "the removed route is not counted from a stale cache")
	c, err = s.Apply(t.Context(), undrained, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State)
	assert.Nil(t, api.get(), "never written again from a stale cache")

	store.deliver()
	c, err = s.Apply(t.Context(), undrained, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.Confirmation{Sink: httproute.RetiringSinkName, State: model.InPlace}, c, "nothing stored: nothing to do")
}
