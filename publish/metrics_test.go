package publish

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// trafficmap_publisher_maps counts the TrafficMaps in every scope's cache, as they come and go.
func TestMapsGaugeCountsCachedMaps(t *testing.T) {
	scopes := []cache.SharedIndexInformer{
		cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1beta1.TrafficMap{}, 0, cache.Indexers{}),
		cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1beta1.TrafficMap{}, 0, cache.Indexers{}),
	}
	reg := prometheus.NewRegistry()
	watchGauges(reg, func() bool { return true }, func() int { return mapCount(scopes) }, func() (int, time.Duration) { return 0, 0 }, func() int { return 0 },
		func() map[model.FallbackReason]int { return nil })
	check := func(n string) {
		t.Helper()
		assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`# HELP trafficmap_publisher_maps TrafficMaps in this replica's cache (the namespaces it watches): with the xDS server's resources, encoded bytes and streams, what its memory grows with.
# TYPE trafficmap_publisher_maps gauge
trafficmap_publisher_maps `+n+"\n"), "trafficmap_publisher_maps"))
	}
	check("0")
	named := func(ns, name string) *v1beta1.TrafficMap {
		m := fleetMap()
		m.Namespace, m.Name = ns, name
		return m
	}
	require.NoError(t, scopes[0].GetStore().Add(named("a", "chat")))
	require.NoError(t, scopes[0].GetStore().Add(named("a", "embed")))
	require.NoError(t, scopes[1].GetStore().Add(named("b", "chat")))
	check("3")
	require.NoError(t, scopes[0].GetStore().Delete(named("a", "chat")))
	check("2")
}

// The Service cache keeps what the writer compares and the sink's expectations read, and
// nothing else: a Service as the API server returns it, slimmed, still matches what the
// publisher wants, and the dropped defaults are gone.
func TestSlimServiceKeepsWhatTheWriterReads(t *testing.T) {
	deleted := metav1.NewTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	stored := &corev1.Service{
		TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "chat-worker-a-116d8f0b", Namespace: "prod", UID: "u1", ResourceVersion: "42",
			DeletionTimestamp: &deleted, Finalizers: []string{"f"},
			Labels:          map[string]string{"app.kubernetes.io/managed-by": "trafficmap-publisher"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "ome.io/v1beta1", Kind: "TrafficMap", Name: "chat", UID: "t1"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "trafficmap-publisher"}}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "a.example.com", SessionAffinity: corev1.ServiceAffinityNone,
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
		Status: corev1.ServiceStatus{Conditions: []metav1.Condition{{Type: "x"}}},
	}
	got, err := slimService(stored)
	require.NoError(t, err)
	want := &corev1.Service{
		TypeMeta: stored.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: stored.Name, Namespace: "prod", UID: "u1", ResourceVersion: "42", DeletionTimestamp: &deleted,
			Finalizers: []string{"f"}, Labels: stored.Labels, OwnerReferences: stored.OwnerReferences},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "a.example.com",
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}},
	}
	assert.Equal(t, want, got)

	tomb := cache.DeletedFinalStateUnknown{Key: "prod/x", Obj: stored}
	passed, err := slimService(tomb)
	require.NoError(t, err)
	assert.Equal(t, tomb, passed, "anything but a Service passes through")
}
