package httproute_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/trafficmap/publisher/httproute"
)

func TestAdoptionOf(t *testing.T) {
	src := httproute.Source{Namespace: "prod", Name: "chat", Service: "chat"}
	ours := map[string]string{httproute.LabelManagedBy: httproute.ManagedByValue, httproute.LabelSourceNamespace: "prod", httproute.LabelSourceName: "chat"}
	ome := map[string]string{httproute.LabelOMEManagedBy: httproute.OMEManagedByValue, httproute.LabelOMESourceName: "chat", httproute.LabelOMESourceNS: "prod"}
	merge := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	with := func(m map[string]string, k, v string) map[string]string { return merge(m, map[string]string{k: v}) }
	tests := []struct {
		name    string
		labels  map[string]string
		fromOME bool
		want    httproute.Adoption
	}{
		{name: "ours", labels: ours, want: httproute.AdoptOwned},
		{name: "ours, adoption on", labels: ours, fromOME: true, want: httproute.AdoptOwned},
		{name: "no labels", labels: nil, fromOME: true, want: httproute.AdoptNone},
		{name: "ome's for the map, adoption off: a conflict", labels: ome, want: httproute.AdoptNone},
		{name: "ome's for the map, adoption on", labels: ome, fromOME: true, want: httproute.AdoptOME},
		{name: "ome's with extra labels", labels: with(ome, "team", "a"), fromOME: true, want: httproute.AdoptOME},
		{name: "ome's for another inferenceservice", labels: with(ome, httproute.LabelOMESourceName, "other"), fromOME: true, want: httproute.AdoptNone},
		{name: "ome's for another namespace", labels: with(ome, httproute.LabelOMESourceNS, "staging"), fromOME: true, want: httproute.AdoptNone},
		{name: "ome's managed-by missing", labels: with(ome, httproute.LabelOMEManagedBy, ""), fromOME: true, want: httproute.AdoptNone},
		{name: "ome's managed-by another value", labels: with(ome, httproute.LabelOMEManagedBy, "someone"), fromOME: true, want: httproute.AdoptNone},
		{name: "adoption cut short: ours and ome's", labels: merge(ours, ome), fromOME: true, want: httproute.AdoptOME},
		{name: "adoption cut short, adoption off: ours", labels: merge(ours, ome), want: httproute.AdoptOwned},
		{name: "ome's labels on our route of another map", labels: merge(with(ours, httproute.LabelSourceName, "other"), ome), fromOME: true, want: httproute.AdoptNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, httproute.AdoptionOf(tc.labels, src, tc.fromOME))
		})
	}
	// OME names objects by the InferenceService, which has the map's name.
	assert.Equal(t, httproute.AdoptNone, httproute.AdoptionOf(ome, httproute.Source{Namespace: "prod", Name: "chat", Service: "other"}, true))
	assert.Equal(t, httproute.AdoptOME, httproute.AdoptionOf(ome, httproute.Source{Namespace: "prod", Name: "chat"}, true))
}

// mapStore is a Store over fixed objects.
type mapStore struct {
	route    *gwapiv1.HTTPRoute
	services []*corev1.Service
}

func (s mapStore) Route(string, string) (*gwapiv1.HTTPRoute, error)     { return s.route, nil }
func (s mapStore) Services(httproute.Source) ([]*corev1.Service, error) { return s.services, nil }
func (mapStore) RoutesSeen(string) string                               { return "" }
func (mapStore) ServicesSeen(string) string                             { return "" }

// Issue 44, D5: a map handed over from OME's publisher and deleted before its route was
// adopted leaves nothing of OME's: with adoption on, Delete removes OME's route and backend
// Services for the map too, and never OME's objects of another map; with adoption off they
// stay (they are OME's).
func TestDeleteRemovesOMEObjectsWhenAdopting(t *testing.T) {
	src := httproute.Source{Namespace: "prod", Name: "chat"}
	omeLabels := func(isvc string) map[string]string {
		return map[string]string{httproute.LabelOMEManagedBy: httproute.OMEManagedByValue, httproute.LabelOMESourceName: isvc,
			httproute.LabelOMESourceNS: "prod"}
	}
	route := &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: httproute.RouteName("chat"), UID: "r1", Labels: omeLabels("chat")}}
	svc := func(name, isvc string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: name, UID: types.UID(name), Labels: omeLabels(isvc)}}
	}
	for _, adopting := range []bool{true, false} {
		t.Run("adopting="+strconv.FormatBool(adopting), func(t *testing.T) {
			gw := gwfake.NewClientset(route.DeepCopy())
			kube := kubefake.NewClientset(svc("tmb-a", "chat"), svc("tmb-b", "chat"), svc("tmb-other", "other"))
			w := httproute.NewWriter(kube, gw, "trafficmap-publisher")
			if adopting {
				w = w.AdoptingFromOME(func(*gwapiv1.HTTPRoute) bool { return true })
			}
			n, err := w.Delete(t.Context(), src, mapStore{route: route})
			require.NoError(t, err)
			_, routeErr := gw.GatewayV1().HTTPRoutes("prod").Get(t.Context(), route.Name, metav1.GetOptions{})
			list, err := kube.CoreV1().Services("prod").List(t.Context(), metav1.ListOptions{})
			require.NoError(t, err)
			var left []string
			for _, s := range list.Items {
				left = append(left, s.Name)
			}
			if adopting {
				assert.Equal(t, 3, n, "OME's route and its two Services of the map")
				assert.True(t, apierrors.IsNotFound(routeErr), "OME's route is gone: %v", routeErr)
				assert.Equal(t, []string{"tmb-other"}, left, "OME's Service of another map stays")
				return
			}
			assert.Zero(t, n)
			assert.NoError(t, routeErr, "OME's route stays without adoption")
			assert.Len(t, left, 3)
		})
	}
}
