package httproute_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/httproute"
)

// storedRoute is the seed's route as the API server returns it after an apply: the desired
// content plus server-set metadata and a status written by the gateway's controller.
func storedRoute(t *testing.T) (desired, stored *gwapiv1.HTTPRoute) {
	t.Helper()
	d, err := httproute.Build(prodConfig, prodSource, compute(t, nil, seed()...), httproute.Inputs{Generation: 4})
	require.NoError(t, err)
	stored = d.Route.DeepCopy()
	stored.UID, stored.ResourceVersion, stored.Generation = "uid-1", "17", 3
	stored.Status.Parents = []gwapiv1.RouteParentStatus{{
		ParentRef:      gwapiv1.ParentReference{Name: "global"},
		ControllerName: "example.com/gateway",
		Conditions:     []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, ObservedGeneration: 3}},
	}}
	return d.Route, stored
}

func TestMatches(t *testing.T) {
	tests := []struct {
		name   string
		change func(r *gwapiv1.HTTPRoute)
		want   bool
	}{
		{"as applied", func(*gwapiv1.HTTPRoute) {}, true},
		{"foreign label", func(r *gwapiv1.HTTPRoute) { r.Labels["team.example.com/owner"] = "someone-else" }, true},
		{"foreign annotation", func(r *gwapiv1.HTTPRoute) { r.Annotations["note.example.com/ticket"] = "OPS-1" }, true},
		{"foreign spec field", func(r *gwapiv1.HTTPRoute) { r.Spec.UseDefaultGateways = gwapiv1.GatewayDefaultScopeAll }, true},
		{"status only", func(r *gwapiv1.HTTPRoute) { r.Status.Parents = nil }, true},
		{"changed weight", func(r *gwapiv1.HTTPRoute) { r.Spec.Rules[0].BackendRefs[0].Weight = ptr.To(int32(0)) }, false},
		{"missing backend", func(r *gwapiv1.HTTPRoute) { r.Spec.Rules[0].BackendRefs = r.Spec.Rules[0].BackendRefs[1:] }, false},
		{"changed hostname", func(r *gwapiv1.HTTPRoute) { r.Spec.Hostnames = []gwapiv1.Hostname{"other.example.com"} }, false},
		{"changed parent", func(r *gwapiv1.HTTPRoute) { r.Spec.ParentRefs[0].Name = "other" }, false},
		{"changed owned annotation", func(r *gwapiv1.HTTPRoute) {
			r.Annotations[httproute.AnnotationDrains] = `{"m":{"cluster":"worker-a","reason":"r"}}`
		}, false},
		{"owned annotation removed", func(r *gwapiv1.HTTPRoute) { delete(r.Annotations, httproute.AnnotationTrafficMapGeneration) }, false},
		{"owned label changed", func(r *gwapiv1.HTTPRoute) { r.Labels[httproute.LabelSourceName] = "other" }, false},
		{"foreign owner reference", func(r *gwapiv1.HTTPRoute) {
			r.OwnerReferences = append(r.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "uid-x"})
		}, true},
		{"owner reference missing (written by an older publisher)", func(r *gwapiv1.HTTPRoute) { r.OwnerReferences = nil }, false},
		{"owner reference to a recreated map", func(r *gwapiv1.HTTPRoute) { r.OwnerReferences[0].UID = "uid-old" }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			desired, stored := storedRoute(t)
			tc.change(stored)
			assert.Equal(t, tc.want, httproute.Matches(desired, stored))
		})
	}
}

func TestServiceMatches(t *testing.T) {
	tests := []struct {
		name   string
		change func(s *corev1.Service)
		want   bool
	}{
		{"as applied", func(*corev1.Service) {}, true},
		{"foreign label", func(s *corev1.Service) { s.Labels["team.example.com/owner"] = "someone-else" }, true},
		{"foreign annotation", func(s *corev1.Service) { s.Annotations = map[string]string{"note.example.com/ticket": "OPS-1"} }, true},
		{"changed host", func(s *corev1.Service) { s.Spec.ExternalName = "chat.worker-c.example.com" }, false},
		{"changed port", func(s *corev1.Service) { s.Spec.Ports[0].Port = 8443 }, false},
		{"changed type", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }, false},
		{"owned label changed", func(s *corev1.Service) { s.Labels[httproute.LabelCluster] = "worker-c" }, false},
		{"owner reference missing (written by an older publisher)", func(s *corev1.Service) { s.OwnerReferences = nil }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := httproute.Build(prodConfig, prodSource, compute(t, nil, seed()...), httproute.Inputs{})
			require.NoError(t, err)
			desired := d.Services[0]
			stored := desired.DeepCopy()
			stored.UID, stored.ResourceVersion = "uid-2", "18"
			stored.Spec.SessionAffinity = corev1.ServiceAffinityNone // defaulted by the API server
			stored.Spec.Ports[0].TargetPort = intstr.FromInt32(stored.Spec.Ports[0].Port)
			tc.change(stored)
			assert.Equal(t, tc.want, httproute.ServiceMatches(desired, stored))
		})
	}
}

// TestApplyConfigurationsCarryEveryBuiltField reads every golden file back and checks that
// the apply configurations hold exactly what Build set: with server-side apply, a field
// missing from the apply would be given up (and Matches would never hold).
func TestApplyConfigurationsCarryEveryBuiltField(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			docs := bytes.Split(raw, []byte("---\n"))
			var route gwapiv1.HTTPRoute
			require.NoError(t, yaml.UnmarshalStrict(docs[0], &route))
			var roundTrip gwapiv1.HTTPRoute
			reencode(t, httproute.RouteApply(&route, ""), &roundTrip)
			assert.Equal(t, route.ObjectMeta, roundTrip.ObjectMeta)
			assert.Equal(t, route.Spec, roundTrip.Spec)

			for _, doc := range docs[1:] {
				switch {
				case bytes.Contains(doc, []byte("\nkind: EndpointSlice\n")):
					var slice discoveryv1.EndpointSlice
					require.NoError(t, yaml.UnmarshalStrict(doc, &slice))
					var back discoveryv1.EndpointSlice
					reencode(t, httproute.EndpointSliceApply(&slice, ""), &back)
					assert.Equal(t, slice, back)
					continue
				case bytes.Contains(doc, []byte("\nkind: Backend\n")):
					continue // applied as the unstructured object Build returns
				}
				var svc corev1.Service
				require.NoError(t, yaml.UnmarshalStrict(doc, &svc))
				var back corev1.Service
				reencode(t, httproute.ServiceApply(&svc, ""), &back)
				assert.Equal(t, svc.ObjectMeta, back.ObjectMeta)
				assert.Equal(t, svc.Spec, back.Spec)
			}
		})
	}
}

// The route and every Service name their TrafficMap as owner: not as controller and not
// blocking its deletion; a source without a UID (a map not yet stored) names no owner.
func TestOwnerReferences(t *testing.T) {
	d, err := httproute.Build(prodConfig, prodSource, compute(t, nil, seed()...), httproute.Inputs{})
	require.NoError(t, err)
	want := []metav1.OwnerReference{{APIVersion: "ome.io/v1beta1", Kind: "TrafficMap", Name: "chat", UID: prodSource.UID}}
	assert.Equal(t, want, d.Route.OwnerReferences)
	require.Len(t, d.Services, 2)
	for _, svc := range d.Services {
		assert.Equal(t, want, svc.OwnerReferences, svc.Name)
	}
	ac := httproute.RouteApply(d.Route, "")
	require.Len(t, ac.OwnerReferences, 1)
	assert.Nil(t, ac.OwnerReferences[0].Controller)
	assert.Nil(t, ac.OwnerReferences[0].BlockOwnerDeletion)

	noUID := prodSource
	noUID.UID = ""
	d, err = httproute.Build(prodConfig, noUID, compute(t, nil, seed()...), httproute.Inputs{})
	require.NoError(t, err)
	assert.Nil(t, d.Route.OwnerReferences)
	assert.Nil(t, d.Services[0].OwnerReferences)
}

func TestApplyConfigurationsNameTheUID(t *testing.T) {
	d, err := httproute.Build(prodConfig, prodSource, compute(t, drainA, seed()...), httproute.Inputs{Drains: drainA})
	require.NoError(t, err)
	route := httproute.RouteApply(d.Route, "uid-1")
	require.NotNil(t, route.UID)
	assert.Equal(t, "uid-1", string(*route.UID))
	assert.Nil(t, httproute.RouteApply(d.Route, "").UID, "no cached copy: no uid")
	svc := httproute.ServiceApply(d.Services[0], "uid-2")
	require.NotNil(t, svc.UID)
	assert.Equal(t, "uid-2", string(*svc.UID))
}

func reencode(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, out))
}
