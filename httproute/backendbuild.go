package httproute

import (
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/weights"
)

// ErrUnresolved marks an entry whose endpoint hostname has never resolved: its
// EndpointSlice would have no address, so the route is not written (the stored one stays).
// It is transient: the map is published once the hostname resolves.
var ErrUnresolved = errors.New("endpoint hostname has not resolved yet")

// Envoy Gateway's Backend API, written as unstructured objects (the publisher does not
// import Envoy Gateway).
var (
	EnvoyBackendGVK = schema.GroupVersionKind{Group: "gateway.envoyproxy.io", Version: "v1alpha1", Kind: "Backend"}
	EnvoyBackendGVR = schema.GroupVersionResource{Group: "gateway.envoyproxy.io", Version: "v1alpha1", Resource: "backends"}
)

// Labels the publisher puts on its EndpointSlices besides its ownership labels.
const (
	// LabelEndpointSliceManagedBy is Kubernetes' label naming who writes a slice.
	LabelEndpointSliceManagedBy = discoveryv1.LabelManagedBy
	// EndpointSliceManagedByValue is the publisher's value of LabelEndpointSliceManagedBy.
	EndpointSliceManagedByValue = "publisher.trafficmap.dev"
)

// addBackend adds entry e's backend objects of kind b to d and returns the reference the
// route's backendRef carries.
func (d *Desired) addBackend(src Source, e weights.EffectiveEntry, b Backends) (gwapiv1.BackendObjectReference, error) {
	d.Kind = b.kind()
	switch d.Kind {
	case BackendEndpointSlice:
		addrs, err := endpointAddresses(src, e, b.Addresses)
		if err != nil {
			return gwapiv1.BackendObjectReference{}, err
		}
		svc := buildSelectorlessService(src, e)
		d.Services = append(d.Services, svc)
		d.EndpointSlices = append(d.EndpointSlices, buildEndpointSlices(src, e, svc, addrs)...)
		return serviceRef(svc.Name, e.Endpoint.Port), nil
	case BackendEnvoyGateway:
		be := buildEnvoyBackend(src, e)
		d.Backends = append(d.Backends, be)
		return gwapiv1.BackendObjectReference{
			Group: ptr(gwapiv1.Group(EnvoyBackendGVK.Group)),
			Kind:  ptr(gwapiv1.Kind(EnvoyBackendGVK.Kind)),
			Name:  gwapiv1.ObjectName(be.GetName()),
			Port:  ptr(e.Endpoint.Port),
		}, nil
	default:
		if _, err := netip.ParseAddr(e.Endpoint.Host); err == nil {
			return gwapiv1.BackendObjectReference{}, fmt.Errorf("%w: trafficmap %s entry %q endpoint %q: an ExternalName backend needs a DNS name, not an IP address",
				ErrInvalidBackend, src.Key(), e.Cluster, e.Endpoint.URL)
		}
		svc := buildService(src, e)
		d.Services = append(d.Services, svc)
		return serviceRef(svc.Name, e.Endpoint.Port), nil
	}
}

func serviceRef(name string, port int32) gwapiv1.BackendObjectReference {
	return gwapiv1.BackendObjectReference{
		Group: ptr(gwapiv1.Group("")),
		Kind:  ptr(gwapiv1.Kind("Service")),
		Name:  gwapiv1.ObjectName(name),
		Port:  ptr(port),
	}
}

// endpointAddresses returns the addresses of e's endpoint: an IP endpoint is its own,
// a hostname's come from resolved; ErrUnresolved when there are none.
func endpointAddresses(src Source, e weights.EffectiveEntry, resolved map[string][]netip.Addr) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(e.Endpoint.Host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	addrs := resolved[e.Endpoint.Host]
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: trafficmap %s entry %q endpoint host %q", ErrUnresolved, src.Key(), e.Cluster, e.Endpoint.Host)
	}
	return addrs, nil
}

// backendLabels are the ownership labels of src plus e's cluster.
func backendLabels(src Source, e weights.EffectiveEntry) map[string]string {
	labels := ownerLabels(src)
	labels[LabelCluster] = e.Cluster
	return labels
}

// buildSelectorlessService is e's Service without a selector: ClusterIP, one port named
// after the scheme (Traefik matches slice ports to it by name) at the endpoint's port.
func buildSelectorlessService(src Source, e weights.EffectiveEntry) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            SelectorlessServiceName(src.Namespace, src.Name, e.Cluster),
			Namespace:       src.Namespace,
			Labels:          backendLabels(src, e),
			OwnerReferences: ownerReferences(src),
		},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{
				Name:     e.Endpoint.Scheme,
				Protocol: corev1.ProtocolTCP,
				Port:     e.Endpoint.Port,
			}},
		},
	}
}

// buildEndpointSlices returns svc's slices: one per address family present in addrs
// (IPv4 first), each endpoint ready, the port named as svc's.
func buildEndpointSlices(src Source, e weights.EffectiveEntry, svc *corev1.Service, addrs []netip.Addr) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, family := range []struct {
		t      discoveryv1.AddressType
		suffix string
		is     func(netip.Addr) bool
	}{
		{discoveryv1.AddressTypeIPv4, "-ipv4", func(a netip.Addr) bool { return a.Unmap().Is4() }},
		{discoveryv1.AddressTypeIPv6, "-ipv6", func(a netip.Addr) bool { return !a.Unmap().Is4() }},
	} {
		var endpoints []discoveryv1.Endpoint
		for _, a := range addrs {
			if family.is(a) {
				endpoints = append(endpoints, discoveryv1.Endpoint{
					Addresses:  []string{a.Unmap().String()},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
				})
			}
		}
		if len(endpoints) == 0 {
			continue
		}
		labels := backendLabels(src, e)
		labels[discoveryv1.LabelServiceName] = svc.Name
		labels[LabelEndpointSliceManagedBy] = EndpointSliceManagedByValue
		out = append(out, &discoveryv1.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: discoveryv1.SchemeGroupVersion.String(), Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{
				Name:            svc.Name + family.suffix,
				Namespace:       svc.Namespace,
				Labels:          labels,
				OwnerReferences: ownerReferences(src),
			},
			AddressType: family.t,
			Endpoints:   endpoints,
			Ports: []discoveryv1.EndpointPort{{
				Name:     ptr(svc.Spec.Ports[0].Name),
				Protocol: ptr(corev1.ProtocolTCP),
				Port:     ptr(e.Endpoint.Port),
			}},
		})
	}
	return out
}

// buildEnvoyBackend is e's Envoy Gateway Backend: one endpoint, an FQDN (an IP endpoint:
// an IP) at the endpoint's port.
func buildEnvoyBackend(src Source, e weights.EffectiveEntry) *unstructured.Unstructured {
	endpoint := map[string]any{"fqdn": map[string]any{"hostname": e.Endpoint.Host, "port": int64(e.Endpoint.Port)}}
	if _, err := netip.ParseAddr(e.Endpoint.Host); err == nil {
		endpoint = map[string]any{"ip": map[string]any{"address": e.Endpoint.Host, "port": int64(e.Endpoint.Port)}}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"endpoints": []any{endpoint}},
	}}
	u.SetGroupVersionKind(EnvoyBackendGVK)
	u.SetName(ServiceName(src.Namespace, src.Name, e.Cluster))
	u.SetNamespace(src.Namespace)
	u.SetLabels(backendLabels(src, e))
	u.SetOwnerReferences(ownerReferences(src))
	return u
}
