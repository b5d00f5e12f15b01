package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
)

// Needs is the permission the status view needs, for permission errors.
const Needs = "status needs get and list on trafficmaps.ome.io, get on inferenceservices.ome.io and httproutes.gateway.networking.k8s.io, " +
	"and get on the taint sources inferenceclusters.modelplane.ai and workloadclusters.ome.io where they are served " +
	"(and, with --sinks xds alone, get on configmaps for the publisher's record; without it the weights are computed without that fallback)"

// Reader reads the objects a status is computed from. It only reads.
type Reader struct {
	Maps     omeclient.Interface
	Metadata metadata.Interface
	Dynamic  dynamic.Interface
	Gateway  gwclient.Interface
	// GatewayRef and GatewaySection override the route's parentRef for the verdict.
	GatewayRef     types.NamespacedName
	GatewaySection string
	// PublisherURL is the publisher's --debug-address (else --http-address) as a URL (http://HOST:PORT); when set,
	// Status reads its /debug/xds with HTTP (http.DefaultClient when nil).
	PublisherURL string
	HTTP         *http.Client
	// NoHostnames skips reading the other TrafficMaps' claims (a list across namespaces):
	// Status.Hostnames is then omitted, as when they cannot be read.
	NoHostnames bool
}

// Status reads the TrafficMap named service in namespace and its objects.
func (r Reader) Status(ctx context.Context, namespace, service string) (Status, error) {
	tm, err := r.Maps.OmeV1beta1().TrafficMaps(namespace).Get(ctx, service, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Status{}, fmt.Errorf("trafficmap %s/%s not found: routing is off for the service, or it has no such InferenceService", namespace, service)
	}
	if err != nil {
		return Status{}, apiError("get", "trafficmaps.ome.io", inNamespace(namespace), err)
	}
	o, err := r.objects(ctx, tm)
	if err != nil {
		return Status{}, err
	}
	if r.PublisherURL != "" {
		if o.XDSSource, err = DebugXDSURL(r.PublisherURL); err != nil {
			return Status{}, err
		}
		if o.XDS, err = ReadXDS(ctx, r.HTTP, o.XDSSource); err != nil {
			return Status{}, err
		}
		if o.Replicas, err = ReadReplicas(ctx, r.HTTP, strings.TrimSuffix(o.XDSSource, "/xds")+"/replicas"); err != nil {
			return Status{}, err
		}
	}
	return Build(o), nil
}

// ReadReplicas reads the publisher's /debug/replicas document at url (the replicas whose
// xDS reports it counts); nil without error when the publisher serves none (no leader
// election).
func ReadReplicas(ctx context.Context, client *http.Client, url string) ([]replicas.Replica, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the publisher's replicas: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("read %s: %s", url, resp.Status)
	}
	var out []replicas.Replica
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxDebugXDSBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode %s: %w", url, err)
	}
	return out, nil
}

// MaxDebugXDSBytes bounds the /debug/xds document ReadXDS accepts.
const MaxDebugXDSBytes = 16 << 20

// DebugXDSURL returns the /debug/xds URL of the publisher whose --debug-address (else --http-address) is publisher,
// given as http://HOST:PORT or https://HOST:PORT (a path is kept as a prefix).
func DebugXDSURL(publisher string) (string, error) {
	u, err := url.Parse(publisher)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("--publisher-url %q: must be http://HOST:PORT or https://HOST:PORT", publisher)
	}
	return u.JoinPath("debug", "xds").String(), nil
}

// ReadXDS reads the publisher's /debug/xds document at debugURL with client
// (http.DefaultClient when nil).
func ReadXDS(ctx context.Context, client *http.Client, debugURL string) (*model.XDSDebugState, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, debugURL, nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", debugURL, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the publisher's xds state: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("read %s: 404 Not Found: the publisher serves /debug/xds only with its xds sink on, at its --debug-address when set, else its --http-address", debugURL)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("read %s: %s", debugURL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxDebugXDSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", debugURL, err)
	}
	if len(body) > MaxDebugXDSBytes {
		return nil, fmt.Errorf("read %s: the document exceeds %d bytes", debugURL, MaxDebugXDSBytes)
	}
	var d model.XDSDebugState
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("decode %s: %w", debugURL, err)
	}
	return &d, nil
}

// Cluster lists every TrafficMap in namespace (all when empty) whose effective weight on
// cluster is positive or unknown.
func (r Reader) Cluster(ctx context.Context, namespace, cluster string) (ClusterTraffic, error) {
	list, err := r.Maps.OmeV1beta1().TrafficMaps(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ClusterTraffic{}, apiError("list", "trafficmaps.ome.io", inNamespace(namespace), err)
	}
	var statuses []Status
	for i := range list.Items {
		tm := &list.Items[i]
		has := false
		for _, e := range tm.Spec.Entries {
			has = has || e.Cluster == cluster
		}
		if !has {
			continue
		}
		o, err := r.objects(ctx, tm)
		if err != nil {
			return ClusterTraffic{}, err
		}
		statuses = append(statuses, Build(o))
	}
	return ForCluster(cluster, namespace, statuses), nil
}

func (r Reader) objects(ctx context.Context, tm *v1beta1.TrafficMap) (Objects, error) {
	o := Objects{TrafficMap: tm, Gateway: r.GatewayRef, GatewaySection: r.GatewaySection}
	src, err := r.Metadata.Resource(v1beta1.InferenceServicesResource).Namespace(tm.Namespace).Get(ctx, tm.Spec.Service, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return o, apiError("get", "inferenceservices.ome.io", inNamespace(tm.Namespace), err)
	default:
		o.Source = src
	}
	route, err := r.Gateway.GatewayV1().HTTPRoutes(tm.Namespace).Get(ctx, httproute.RouteName(tm.Name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return o, apiError("get", "httproutes.gateway.networking.k8s.io", inNamespace(tm.Namespace), err)
	default:
		o.Route = route
	}
	if o.Route == nil {
		o.Record = r.record(ctx, tm)
	}
	o.Clusters, err = r.taints(ctx, tm)
	if err != nil {
		return o, err
	}
	if r.NoHostnames {
		return o, nil
	}
	o.Claims, o.ClaimsRead, err = r.claims(ctx, tm)
	return o, err
}

// record reads the publisher's record ConfigMap of tm (kept with --sinks xds alone, where no
// route carries the last valid drains, taints and tolerations); nil when there is none, it is
// not the publisher's for this map, or it cannot be read (the weights are then computed
// without that fallback, as without a route).
func (r Reader) record(ctx context.Context, tm *v1beta1.TrafficMap) *model.Recorded {
	if r.Dynamic == nil {
		return nil
	}
	u, err := r.Dynamic.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(tm.Namespace).
		Get(ctx, httproute.RecordName(tm.Name), metav1.GetOptions{})
	if err != nil {
		return nil
	}
	if !httproute.Owned(u.GetLabels(), httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service}) {
		return nil
	}
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	rec := model.RecordedFromData(data)
	return &rec
}

// claims reads the other TrafficMaps' claims on names: every namespace's, or the map's own
// namespace's when listing across namespaces is forbidden; read is false when that is
// forbidden too.
func (r Reader) claims(ctx context.Context, tm *v1beta1.TrafficMap) (claims []model.Claim, read bool, err error) {
	ns := ""
	list, err := r.Maps.OmeV1beta1().TrafficMaps(ns).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		ns = tm.Namespace
		list, err = r.Maps.OmeV1beta1().TrafficMaps(ns).List(ctx, metav1.ListOptions{})
	}
	if apierrors.IsForbidden(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, apiError("list", "trafficmaps.ome.io", inNamespace(ns), err)
	}
	isvcs, err := r.Metadata.Resource(v1beta1.InferenceServicesResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, apiError("list", "inferenceservices.ome.io", inNamespace(ns), err)
	}
	hosts := map[types.NamespacedName]string{}
	for _, m := range isvcs.Items {
		hosts[model.KeyOf(&m)] = strings.TrimSpace(m.Annotations[v1beta1.AnnotationGlobalHost])
	}
	var out []model.Claim
	for _, m := range list.Items {
		if m.Namespace == tm.Namespace && m.Name == tm.Name || m.DeletionTimestamp != nil {
			continue
		}
		c := model.Claim{Kind: model.KindTrafficMap, Namespace: m.Namespace, Name: m.Name, Created: m.CreationTimestamp.Time,
			Names: []string{model.GRPCName(m.Namespace, m.Spec.Service)}, Journaled: model.JournaledNames(&m, "")}
		if h := hosts[model.Key(m.Namespace, m.Spec.Service)]; h != "" {
			c.Names = append(c.Names, h)
		}
		out = append(out, c)
	}
	return out, true, nil
}

// taints reads the taint sources of the map's entry clusters, as the publisher does. A
// source that is not served, or has no object for a cluster, contributes nothing.
func (r Reader) taints(ctx context.Context, tm *v1beta1.TrafficMap) ([]model.ClusterTaints, error) {
	var out []model.ClusterTaints
	for _, e := range tm.Spec.Entries {
		u, err := r.Dynamic.Resource(model.InferenceClustersResource).Get(ctx, e.Cluster, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, apiError("get", "inferenceclusters.modelplane.ai", "at cluster scope", err)
		default:
			out = append(out, model.InferenceClusterTaints(u))
		}
		m, err := r.Metadata.Resource(model.WorkloadClustersResource).Get(ctx, e.Cluster, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, apiError("get", "workloadclusters.ome.io", "at cluster scope", err)
		default:
			out = append(out, model.WorkloadClusterTaints(m.Name, m.Annotations))
		}
	}
	return out, nil
}

// inNamespace names where a namespaced request went.
func inNamespace(namespace string) string {
	if namespace == "" {
		return "in all namespaces"
	}
	return "in namespace " + namespace
}

// ErrForbidden is wrapped by the Reader's errors for a request RBAC refused.
var ErrForbidden = errors.New("forbidden")

func apiError(verb, resource, where string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%w: cannot %s %s %s; %s", ErrForbidden, verb, resource, where, Needs)
	}
	return fmt.Errorf("%s %s %s: %w", verb, resource, where, err)
}
