package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// With --sinks xds alone there is no route to record the last valid drains on: the publisher
// keeps them in a ConfigMap of its own, so after a restart a malformed drain annotation keeps
// the map on xDS with the last valid drains (Published says InvalidDrainAnnotation) instead
// of dropping it. The record goes with the map.
func TestXDSOnlyFallbackSurvivesRestart(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: xdstest.StartBackend(t, "worker-a"), Weight: 1},
		{Cluster: "worker-b", Endpoint: xdstest.StartBackend(t, "worker-b"), Weight: 1},
	})
	xdsOnly := func(c *publish.Config) { c.Sinks, c.XDSAddress = []string{publish.SinkXDS}, "127.0.0.1:0" }
	pub := f.startPublisher(xdsOnly)
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")

	cms := kube.CoreV1().ConfigMaps(f.ns)
	rec, err := cms.Get(context.Background(), publish.RecordName(service), metav1.GetOptions{})
	require.NoError(t, err, "the record is written before the status says Published")
	assert.Equal(t, httproute.OwnerLabels(httproute.Source{Namespace: f.ns, Name: service, Service: service}), rec.Labels)
	assert.JSONEq(t, seedDrain, rec.Data[model.RecordKeyDrains])
	require.NotEmpty(t, rec.ManagedFields)
	assert.Equal(t, publish.DefaultFieldManager, rec.ManagedFields[0].Manager)
	assert.Equal(t, metav1.ManagedFieldsOperationApply, rec.ManagedFields[0].Operation)
	require.Len(t, rec.OwnerReferences, 1)
	assert.Equal(t, f.getMap().UID, rec.OwnerReferences[0].UID, "garbage collected with the map")
	assert.Equal(t, 1, len(rec.ManagedFields), "one writer")

	pub.stop(t)
	f.drain(`{"x":{}}`)
	restarted := f.startPublisher(xdsOnly)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidDrainAnnotation), "keeping the last valid drains (maintenance-a on worker-a)")
	client := xdsClient(t, restarted.xdsAddr, "grpc-client-1", service+"."+f.ns)
	assert.Equal(t, map[string]int{"worker-b": 20}, spread(t, client, 20), "the map stays on xDS with the last valid drains")
	st := admin(t).run(t, "status", service, "-n", f.ns)
	assert.Contains(t, st.stdout, "worker-a   1        0           maintenance-a", "status computes with the record's fallback, as the publisher: %s", st.stdout)
	again, err := cms.Get(context.Background(), publish.RecordName(service), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, rec.ResourceVersion, again.ResourceVersion, "a fallback plan rewrites nothing")

	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(context.Background(), service, metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := cms.Get(context.Background(), publish.RecordName(service), metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "record deleted with the map: %v", err)
	}, waitTimeout, tick)
}

// A ConfigMap at the record's name that is not the publisher's is neither overwritten nor
// trusted: a malformed drain then has no fallback and nothing is published.
func TestXDSOnlyForeignRecordIgnored(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	cms := kube.CoreV1().ConfigMaps(f.ns)
	foreign, err := cms.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: publish.RecordName(service)},
		Data:       map[string]string{model.RecordKeyDrains: seedDrain, "team": "someone-else"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	f.startPublisher(func(c *publish.Config) { c.Sinks, c.XDSAddress = []string{publish.SinkXDS}, "127.0.0.1:0" })
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a)")
	f.drain(`{"x":{}}`)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidDrainAnnotation), "nothing is published")
	got, err := cms.Get(context.Background(), publish.RecordName(service), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, foreign.ResourceVersion, got.ResourceVersion, "never written")
}
