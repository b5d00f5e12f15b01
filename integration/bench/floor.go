package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapplyv1 "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// floorNamespace holds the bare writer's objects; the publisher watches only namespace.
const floorNamespace = "bench-floor"

// bareWrites is P2's floor: the time a bare client takes to make the publisher's minimum
// writes for n maps (per map one route, a backend Service per cluster, one status write)
// on the same API server at the publisher's client rate limit (qps, burst), with as many
// writers as the publisher has workers times a map's Services. Its objects live in a
// namespace of their own and are deleted afterwards (not timed).
func bareWrites(ctx context.Context, cfg *rest.Config, n int, qps float64, burst, workers int, meter cpuMeter) (time.Duration, int, string, error) {
	fast, err := kubernetes.NewForConfig(cfg) // for the clean-up
	if err != nil {
		return 0, 0, "", err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(qps), burst
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, 0, "", err
	}
	gw, err := gwclient.NewForConfig(cfg)
	if err != nil {
		return 0, 0, "", err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, 0, "", fmt.Errorf("create namespace %s: %w", floorNamespace, err)
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
			_, err := kube.CoreV1().Services(floorNamespace).Apply(ctx, svc, apply)
			return err
		}
		name := mapName(k - n*clustersPerMap) // the route, then its status
		if _, err := gw.GatewayV1().HTTPRoutes(floorNamespace).Apply(ctx, gwapplyv1.HTTPRoute(name, floorNamespace).
			WithSpec(gwapplyv1.HTTPRouteSpec().WithHostnames(gwapiv1.Hostname(name+".example.com"))), apply); err != nil {
			return err
		}
		_, err := gw.GatewayV1().HTTPRoutes(floorNamespace).ApplyStatus(ctx, gwapplyv1.HTTPRoute(name, floorNamespace).
			WithStatus(gwapplyv1.HTTPRouteStatus().WithParents(gwapplyv1.RouteParentStatus().
				WithParentRef(gwapplyv1.ParentReference().WithName(gatewayName)).WithControllerName("bench.trafficmap.dev/floor").
				WithConditions(metav1ac.Condition().WithType("Accepted").WithStatus(metav1.ConditionTrue).WithReason("Accepted").
					WithMessage("bare write").WithLastTransitionTime(metav1.Now())))), apply)
		return err
	})
	elapsed, cores := time.Since(start), meter.cores(cpu0, meter.read(), runtime.NumCPU())
	if err != nil {
		return 0, 0, "", fmt.Errorf("bare writes: %w", err)
	}
	if err := parallelDo(n*clustersPerMap, 16, func(k int) error {
		return fast.CoreV1().Services(floorNamespace).Delete(ctx, fmt.Sprintf("%s-%s", mapName(k/clustersPerMap), clusterName(k%clustersPerMap)), metav1.DeleteOptions{})
	}); err != nil {
		return 0, 0, "", fmt.Errorf("delete the bare writer's services: %w", err)
	}
	if err := gw.GatewayV1().HTTPRoutes(floorNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return 0, 0, "", fmt.Errorf("delete the bare writer's routes: %w", err)
	}
	return elapsed, n * (clustersPerMap + 2), cores, nil
}
