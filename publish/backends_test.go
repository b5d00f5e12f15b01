package publish

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
)

// The GatewayClass controllerName is read once per Gateway and cached; a refresh that finds
// another controller reports a change (the publisher then requeues every map); a failed
// read keeps the last answer, and with none yet it is an error, not "unknown".
func TestGatewayClasses(t *testing.T) {
	gw := gwfake.NewSimpleClientset()
	// Created through the client: the fake's tracker files a Gateway passed to the
	// constructor under another version.
	_, err := gw.GatewayV1().Gateways("infra").Create(context.Background(),
		&gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "edge"}, Spec: gwapiv1.GatewaySpec{GatewayClassName: "eg"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = gw.GatewayV1().GatewayClasses().Create(context.Background(),
		&gwapiv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "eg"}, Spec: gwapiv1.GatewayClassSpec{ControllerName: "gateway.envoyproxy.io/gatewayclass-controller"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	g := newGatewayClasses(gw, nil)
	edge := types.NamespacedName{Namespace: "infra", Name: "edge"}
	name, err := g.controllerName(edge)
	require.NoError(t, err)
	assert.Equal(t, "gateway.envoyproxy.io/gatewayclass-controller", name)

	missing, err := g.controllerName(types.NamespacedName{Namespace: "infra", Name: "none"})
	require.NoError(t, err)
	assert.Empty(t, missing, "no such Gateway: unknown")

	ctx := context.Background()
	assert.False(t, g.refresh(ctx), "nothing changed")
	class, err := gw.GatewayV1().GatewayClasses().Get(ctx, "eg", metav1.GetOptions{})
	require.NoError(t, err)
	class.Spec.ControllerName = "traefik.io/gateway-controller"
	_, err = gw.GatewayV1().GatewayClasses().Update(ctx, class, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.True(t, g.refresh(ctx))
	name, err = g.controllerName(edge)
	require.NoError(t, err)
	assert.Equal(t, "traefik.io/gateway-controller", name)

	gw.PrependReactor("get", "gateways", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("api server unavailable")
	})
	assert.False(t, g.refresh(ctx), "a failed read keeps the last answer")
	name, err = g.controllerName(edge)
	require.NoError(t, err)
	assert.Equal(t, "traefik.io/gateway-controller", name)
	_, err = g.controllerName(types.NamespacedName{Namespace: "other", Name: "gw"})
	assert.ErrorContains(t, err, "api server unavailable")
}
