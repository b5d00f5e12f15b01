package gatewaykit

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// CreateGatewayClass creates the cluster-scoped GatewayClass name for controller.
func CreateGatewayClass(ctx context.Context, gw gwclient.Interface, name, controller string) error {
	_, err := gw.GatewayV1().GatewayClasses().Create(ctx, &gwapiv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gwapiv1.GatewayClassSpec{ControllerName: gwapiv1.GatewayController(controller)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create gatewayclass %s: %w", name, err)
	}
	return nil
}

// CreateGateway creates Gateway name in ns of class with one HTTP listener "web" on port.
func CreateGateway(ctx context.Context, gw gwclient.Interface, ns, name, class string, port int) error {
	_, err := gw.GatewayV1().Gateways(ns).Create(ctx, &gwapiv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: gwapiv1.GatewaySpec{
			GatewayClassName: gwapiv1.ObjectName(class),
			Listeners: []gwapiv1.Listener{{
				Name: "web", Port: gwapiv1.PortNumber(port), Protocol: gwapiv1.HTTPProtocolType,
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create gateway %s/%s: %w", ns, name, err)
	}
	return nil
}

// WaitGatewayCondition polls until the Gateway has condition typ True at its generation;
// when ctx ends first the error says what was last seen.
func WaitGatewayCondition(ctx context.Context, gw gwclient.Interface, ns, name, typ string) error {
	for {
		g, err := gw.GatewayV1().Gateways(ns).Get(ctx, name, metav1.GetOptions{})
		last := ""
		if err != nil {
			last = err.Error()
		} else if last = notTrue(g, typ); last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gateway %s/%s: %s never came (last: %s): %w", ns, name, typ, last, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// notTrue says why g's condition typ is not True at its generation ("" when it is).
func notTrue(g *gwapiv1.Gateway, typ string) string {
	cond := meta.FindStatusCondition(g.Status.Conditions, typ)
	switch {
	case cond == nil:
		return "no " + typ + " condition yet"
	case cond.ObservedGeneration != g.Generation:
		return fmt.Sprintf("%s about generation %d, not %d", typ, cond.ObservedGeneration, g.Generation)
	case cond.Status != metav1.ConditionTrue:
		return fmt.Sprintf("%s %s: %s: %s", typ, cond.Status, cond.Reason, cond.Message)
	}
	return ""
}
