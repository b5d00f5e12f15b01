package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/integration/standin"
)

// demo holds the clients and the objects the steps work on.
type demo struct {
	kube    kubernetes.Interface
	gw      gwclient.Interface
	tmc     omeclient.Interface
	dyn     dynamic.Interface
	routing standin.Routing
	show    *shower
	pub     *runningPublisher
	isvcUID types.UID
}

// newDemo builds the clients for the control plane, with a client rate limit that polling
// every pollInterval stays under.
func newDemo(cp *controlPlane) (*demo, error) {
	cfg := rest.CopyConfig(cp.cfg)
	cfg.QPS, cfg.Burst = 100, 200
	d := &demo{}
	var err error
	if d.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if d.gw, err = gwclient.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("gateway api client: %w", err)
	}
	if d.tmc, err = omeclient.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("trafficmap client: %w", err)
	}
	if d.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	d.routing = standin.Routing{Client: d.tmc}
	d.show = newShower(d, cp.kubeconfig)
	return d, nil
}

// setup creates what OME and the gateway would have created before the publisher starts:
// the namespace, the Gateway prod/global (served by the stand-in gateway until ctx is done),
// the InferenceService chat and the TrafficMap chat with the routing controller's status.
func (d *demo) setup(ctx context.Context) error {
	heading("Setup: namespace prod, Gateway prod/global, InferenceService chat, TrafficMap chat")
	if _, err := d.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	_, err := standin.StartGateway(ctx, d.kube, d.gw, namespace, gatewayName, func(format string, args ...any) {
		fmt.Printf("stand-in gateway: "+format+"\n", args...)
	})
	if err != nil {
		return fmt.Errorf("start stand-in gateway: %w", err)
	}
	fmt.Printf("stand-in gateway controller %s serves Gateway %s/%s\n", standin.ControllerName, namespace, gatewayName)

	isvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ome.io/v1beta1",
		"kind":       "InferenceService",
		"metadata": map[string]any{"name": service, "namespace": namespace,
			"annotations": map[string]any{v1beta1.AnnotationGlobalHost: globalHost}},
		"spec": map[string]any{"placement": map[string]any{"mode": "All", "clusterSelector": map[string]any{}}},
	}}
	created, err := d.dyn.Resource(v1beta1.InferenceServicesResource).Namespace(namespace).Create(ctx, isvc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create inferenceservice %s/%s: %w", namespace, service, err)
	}
	d.isvcUID = created.GetUID()
	fmt.Printf("InferenceService %s/%s created (placement mode All, %s: %s)\n", namespace, service, v1beta1.AnnotationGlobalHost, globalHost)

	_, err = d.tmc.OmeV1beta1().TrafficMaps(namespace).Create(ctx, &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: namespace},
		Spec: v1beta1.TrafficMapSpec{Service: service, Mode: v1beta1.PlacementModeAll, ObservedISVCGeneration: 1, Entries: []v1beta1.TrafficMapEntry{
			{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 1, Healthy: true},
			{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 1, Healthy: true},
		}},
	}, metav1.CreateOptions{FieldManager: v1beta1.RoutingFieldManager})
	if err != nil {
		return fmt.Errorf("create trafficmap %s/%s: %w", namespace, service, err)
	}
	if err := d.routingStatus(ctx, 2, nil); err != nil {
		return err
	}
	fmt.Println("stand-in routing controller: TrafficMap chat with worker-a and worker-b at weight 1; status sourceUID, Routable=True, OverrideActive=False")
	return nil
}

// routingStatus applies the routing controller's status: sourceUID, Routable True with the
// number of serving homes, and OverrideActive True when drainIDs is not empty.
func (d *demo) routingStatus(ctx context.Context, serving int, drainIDs []string) error {
	routable := metav1.Condition{Status: metav1.ConditionTrue, Reason: "Routable", Message: fmt.Sprintf("%d home(s) serving", serving)}
	override := metav1.Condition{Status: metav1.ConditionFalse, Reason: "NoOverrides", Message: "no traffic-drain annotation override is configured"}
	if len(drainIDs) > 0 {
		override = metav1.Condition{Status: metav1.ConditionTrue, Reason: "OverridesApplied",
			Message: fmt.Sprintf("traffic-drain override(s) %v hold an entry at weight 0", drainIDs)}
	}
	if _, err := d.routing.ApplyStatus(ctx, namespace, service, d.isvcUID, routable, override); err != nil {
		return fmt.Errorf("stand-in routing controller: %w", err)
	}
	return nil
}

// initialPublish waits for the first publication of weights 1/1.
func (d *demo) initialPublish(ctx context.Context) error {
	heading("Step 1: initial publish")
	if _, err := d.waitPublished(ctx, expect{weights: map[string]int32{"worker-a": 1, "worker-b": 1}}); err != nil {
		return err
	}
	return d.show.state(ctx)
}

// drain drains worker-a by the annotation, as the seed does, then lets the stand-in routing
// controller update the TrafficMap, and shows PUBLISHED going False then True.
func (d *demo) drain(ctx context.Context) error {
	heading("Step 2: drain worker-a (annotation " + drainAnnotation + ", as in the seed)")
	watch, err := d.watchPublished(ctx)
	if err != nil {
		return err
	}
	defer watch.stop()
	if err := d.show.setDrain(ctx); err != nil {
		return err
	}
	tm, err := d.waitPublished(ctx, expect{weights: map[string]int32{"worker-a": 0, "worker-b": 1}})
	if err != nil {
		return err
	}
	fmt.Printf("publisher: computed worker-a=0 from the annotation itself; Published=True at generation %d, before the routing controller changed the TrafficMap\n", tm.Generation)

	tm, err = d.routing.ApplyDrain(ctx, namespace, service, drainedCluster, drainID)
	if err != nil {
		return fmt.Errorf("stand-in routing controller: %w", err)
	}
	if err := d.routingStatus(ctx, 1, []string{drainID}); err != nil {
		return err
	}
	fmt.Printf("stand-in routing controller (OME's part): entry worker-a weight 0, drainRefs [%s] (TrafficMap generation %d); OverrideActive=True/OverridesApplied\n", drainID, tm.Generation)

	if _, err := d.waitPublished(ctx, expect{generation: tm.Generation, weights: map[string]int32{"worker-a": 0, "worker-b": 1}}); err != nil {
		return err
	}
	if err := watch.report(ctx, tm.Generation); err != nil {
		return err
	}
	return d.show.state(ctx)
}

// undrain removes the annotation, lets the stand-in routing controller give worker-a its
// weight back, and shows PUBLISHED going False then True again.
func (d *demo) undrain(ctx context.Context) error {
	heading("Step 3: undrain worker-a (remove the annotation)")
	watch, err := d.watchPublished(ctx)
	if err != nil {
		return err
	}
	defer watch.stop()
	if err := d.show.removeDrain(ctx); err != nil {
		return err
	}
	tm, err := d.waitPublished(ctx, expect{weights: map[string]int32{"worker-a": 0, "worker-b": 1}, noRecordedDrains: true})
	if err != nil {
		return err
	}
	fmt.Printf("publisher: the annotation is gone, but worker-a stays at 0 while its TrafficMap entry still lists drainRefs [%s] (Published=True at generation %d)\n", drainID, tm.Generation)

	tm, err = d.routing.Recompute(ctx, namespace, service, drainedCluster, 1)
	if err != nil {
		return fmt.Errorf("stand-in routing controller: %w", err)
	}
	if err := d.routingStatus(ctx, 2, nil); err != nil {
		return err
	}
	fmt.Printf("stand-in routing controller (OME's part): entry worker-a weight 1, no drainRefs (TrafficMap generation %d); OverrideActive=False/NoOverrides\n", tm.Generation)

	if _, err := d.waitPublished(ctx, expect{generation: tm.Generation, weights: map[string]int32{"worker-a": 1, "worker-b": 1}}); err != nil {
		return err
	}
	if err := watch.report(ctx, tm.Generation); err != nil {
		return err
	}
	return d.show.state(ctx)
}

// deleteMap deletes the TrafficMap and waits until the publisher removed its route and
// backend Services.
func (d *demo) deleteMap(ctx context.Context) error {
	heading("Step 4: clean up (delete the TrafficMap)")
	if err := d.show.deleteTrafficMap(ctx); err != nil {
		return err
	}
	if err := d.waitRemoved(ctx); err != nil {
		return err
	}
	fmt.Println("publisher: removed HTTPRoute chat-global and its backend Services; left in prod:")
	return d.show.leftovers(ctx)
}

// heading prints a step title.
func heading(title string) {
	fmt.Printf("\n=== %s ===\n", title)
}
