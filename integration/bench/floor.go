package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapplyv1 "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeac "github.com/trafficmap/publisher/api/client/applyconfiguration/api/v1beta1"
	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/statusapply"
)

// floorNamespace holds the bare writer's objects; the publisher watches only namespace.
const floorNamespace = "bench-floor"

// floorWritesPerMap is what the publisher must write for a new map under OME's publisher
// protocol: a backend Service per cluster, the route, the TrafficMap's finalizer (before
// any effect), its claim journal (durable before any sink serves the names), its record
// ConfigMap (the last valid drains, kept for the fallback) and its Published condition
// (after the sinks confirm): the journal and Published cannot be one write.
const floorWritesPerMap = clustersPerMap + 5

// floorGatewayWritesPerMap is what the gateway writes for a new map in the same cold start:
// its verdict on the route (one route status write; the stand-in's count in the publisher's
// run is reported beside it). The floor makes it too, with the gateway's client, so the
// ratio to it measures the publisher, not the gateway.
const floorGatewayWritesPerMap = 1

// floorController is the controller name the floor's gateway writes its route status as.
const floorController = "bench.trafficmap.dev/floor-gateway"

// bareWrites is P2's floor: the time a bare client takes to make floorWritesPerMap writes
// for each of n maps, the same kinds, subresources and field managers' shapes as the
// publisher's, on the same API server at the publisher's client rate limit (qps, burst),
// with as many writers as the publisher has workers times a map's Services; a map's
// TrafficMap writes go in the publisher's order, one after the other, after the gateway's
// route status write (floorGatewayWritesPerMap, with an unlimited client as the stand-in's):
// Published waits for the gateway's verdict. Its objects live in
// a namespace of their own: the TrafficMaps are created before the clock starts (as the
// fleet's are before the publisher's), and everything is deleted afterwards (not timed).
func bareWrites(ctx context.Context, cfg *rest.Config, n int, qps float64, burst, workers int, meter cpuMeter) (time.Duration, int, string, error) {
	fast, err := floorClients(cfg) // the set-up and the clean-up
	if err != nil {
		return 0, 0, "", err
	}
	limited := rest.CopyConfig(cfg)
	limited.QPS, limited.Burst = float32(qps), burst
	c, err := floorClients(limited)
	if err != nil {
		return 0, 0, "", err
	}
	if err := floorSetUp(ctx, fast, n); err != nil {
		return 0, 0, "", err
	}
	apply := metav1.ApplyOptions{FieldManager: "bench-floor", Force: true}
	start, cpu0 := time.Now(), meter.read()
	err = parallelDo(n*(clustersPerMap+1), max(workers, 1)*clustersPerMap, func(k int) error {
		if k < n*clustersPerMap {
			i, j := k/clustersPerMap, k%clustersPerMap
			svc := corev1ac.Service(fmt.Sprintf("%s-%s", mapName(i), clusterName(j)), floorNamespace).
				WithSpec(corev1ac.ServiceSpec().WithType(corev1.ServiceTypeExternalName).
					WithExternalName(fmt.Sprintf("%s.%s.example.com", mapName(i), clusterName(j))).
					WithPorts(corev1ac.ServicePort().WithName("https").WithProtocol(corev1.ProtocolTCP).WithPort(443)))
			_, err := c.kube.CoreV1().Services(floorNamespace).Apply(ctx, svc, apply)
			return err
		}
		return floorMapWrites(ctx, c, fast, mapName(k-n*clustersPerMap), apply)
	})
	elapsed, cores := time.Since(start), meter.cores(cpu0, meter.read(), runtime.NumCPU())
	if err != nil {
		return 0, 0, "", fmt.Errorf("bare writes: %w", err)
	}
	if err := floorCleanUp(ctx, fast, n); err != nil {
		return 0, 0, "", err
	}
	return elapsed, n * (floorWritesPerMap + floorGatewayWritesPerMap), cores, nil
}

// floorClients are the bare writer's clients over cfg.
// Its Services travel as protobuf, as the publisher's do.
func floorClients(cfg *rest.Config) (clients, error) {
	pc := rest.CopyConfig(cfg)
	pc.ContentType = kruntime.ContentTypeProtobuf
	pc.AcceptContentTypes = kruntime.ContentTypeProtobuf + "," + kruntime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(pc)
	if err != nil {
		return clients{}, err
	}
	gw, err := gwclient.NewForConfig(cfg)
	if err != nil {
		return clients{}, err
	}
	tm, err := omeclient.NewForConfig(cfg)
	if err != nil {
		return clients{}, err
	}
	return clients{kube: kube, gw: gw, tm: tm}, nil
}

// floorSetUp creates the floor's namespace and its n TrafficMaps, shaped as the fleet's.
func floorSetUp(ctx context.Context, c clients, n int) error {
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", floorNamespace, err)
	}
	return parallelDo(n, 32, func(i int) error {
		_, err := c.tm.OmeV1beta1().TrafficMaps(floorNamespace).Create(ctx, fleetMap(floorNamespace, mapName(i)), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create trafficmap %s/%s: %w", floorNamespace, mapName(i), err)
		}
		return nil
	})
}

// floorMapWrites makes one map's writes other than its Services, in the publisher's
// order: the route, the gateway's verdict on it (with gateway's client), the finalizer, the
// claim journal, the record ConfigMap, then Published True.
func floorMapWrites(ctx context.Context, c, gateway clients, name string, apply metav1.ApplyOptions) error {
	route, err := c.gw.GatewayV1().HTTPRoutes(floorNamespace).Apply(ctx, gwapplyv1.HTTPRoute(name, floorNamespace).
		WithSpec(gwapplyv1.HTTPRouteSpec().WithHostnames(gwapiv1.Hostname(name+".example.com")).
			WithParentRefs(gwapplyv1.ParentReference().WithName("floor-gateway"))), apply)
	if err != nil {
		return err
	}
	if err := floorGatewayVerdict(ctx, gateway, route); err != nil {
		return err
	}
	maps := c.tm.OmeV1beta1().TrafficMaps(floorNamespace)
	tm, err := maps.Apply(ctx, omeac.TrafficMap(name, floorNamespace).WithFinalizers(model.Finalizer), apply)
	if err != nil {
		return err
	}
	journal := &v1beta1.TrafficMapPublisherStatus{PublisherName: "bench-floor",
		ClaimedTargets: []string{"grpc:" + name + "." + floorNamespace, "hostname:" + name + "." + floorNamespace + ".example.com"}}
	if tm, err = maps.ApplyStatus(ctx, statusapply.Apply(tm, false, 0, nil, nil, journal), apply); err != nil {
		return err
	}
	record := corev1ac.ConfigMap(httproute.RecordName(name), floorNamespace).
		WithLabels(httproute.OwnerLabels(httproute.Source{Namespace: floorNamespace, Name: name, Service: name})).
		WithData(map[string]string{model.RecordKeyContent: fmt.Sprintf("%064x", len(name))})
	if _, err := c.kube.CoreV1().ConfigMaps(floorNamespace).Apply(ctx, record, apply); err != nil {
		return err
	}
	cond := &metav1.Condition{Type: v1beta1.ConditionPublished, Status: metav1.ConditionTrue, Reason: "Published",
		Message: "bare write", ObservedGeneration: tm.Generation, LastTransitionTime: metav1.Now()}
	_, err = maps.ApplyStatus(ctx, statusapply.Apply(tm, true, tm.Generation, nil, cond, journal), apply)
	return err
}

// floorGatewayVerdict writes route's status as a gateway accepting it does: Accepted and
// ResolvedRefs at its generation for its parent.
func floorGatewayVerdict(ctx context.Context, c clients, route *gwapiv1.HTTPRoute) error {
	next := route.DeepCopy()
	at := metav1.Now()
	next.Status.Parents = []gwapiv1.RouteParentStatus{{ParentRef: route.Spec.ParentRefs[0], ControllerName: floorController,
		Conditions: []metav1.Condition{
			{Type: string(gwapiv1.RouteConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gwapiv1.RouteReasonAccepted), ObservedGeneration: route.Generation, LastTransitionTime: at},
			{Type: string(gwapiv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue, Reason: string(gwapiv1.RouteReasonResolvedRefs), ObservedGeneration: route.Generation, LastTransitionTime: at},
		}}}
	if _, err := c.gw.GatewayV1().HTTPRoutes(floorNamespace).UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: "bench-floor-gateway"}); err != nil {
		return fmt.Errorf("write the floor gateway's status of httproute %s/%s: %w", route.Namespace, route.Name, err)
	}
	return nil
}

// floorCleanUp deletes the floor's objects: the Services, the routes, the record
// ConfigMaps (and the namespace's own kube-root-ca.crt, which the namespace controller
// makes again), and the TrafficMaps
// after their finalizer (the bare writer's own field) is released.
func floorCleanUp(ctx context.Context, c clients, n int) error {
	if err := parallelDo(n*clustersPerMap, 16, func(k int) error {
		return c.kube.CoreV1().Services(floorNamespace).Delete(ctx, fmt.Sprintf("%s-%s", mapName(k/clustersPerMap), clusterName(k%clustersPerMap)), metav1.DeleteOptions{})
	}); err != nil {
		return fmt.Errorf("delete the bare writer's services: %w", err)
	}
	if err := c.gw.GatewayV1().HTTPRoutes(floorNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete the bare writer's routes: %w", err)
	}
	if err := c.kube.CoreV1().ConfigMaps(floorNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete the bare writer's record configmaps: %w", err)
	}
	release := metav1.ApplyOptions{FieldManager: "bench-floor", Force: true}
	if err := parallelDo(n, 16, func(i int) error {
		_, err := c.tm.OmeV1beta1().TrafficMaps(floorNamespace).Apply(ctx, omeac.TrafficMap(mapName(i), floorNamespace), release)
		return err
	}); err != nil {
		return fmt.Errorf("release the bare writer's finalizers: %w", err)
	}
	if err := c.tm.OmeV1beta1().TrafficMaps(floorNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete the bare writer's trafficmaps: %w", err)
	}
	return nil
}
