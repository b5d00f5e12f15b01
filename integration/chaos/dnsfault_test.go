package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	omefake "github.com/trafficmap/publisher/api/client/clientset/versioned/fake"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// Without the Traefik part the schedule is the run's 14 kinds as before (the smoke run's
// order is unchanged); with it, the DNS fault comes after the gateway's rejection.
func TestScheduleKinds(t *testing.T) {
	f := &faults{}
	random, order := f.scheduleKinds()
	assert.Equal(t, faultKinds, random)
	assert.Equal(t, roundRobinKinds, order)
	assert.Equal(t, faultKinds, reportKinds(false))
	f.dns = &dnsTarget{}
	random, order = f.scheduleKinds()
	assert.Len(t, random, len(faultKinds)+1)
	assert.Contains(t, random, faultDNSChange)
	assert.Len(t, order, len(roundRobinKinds)+1)
	at := slices.Index(order, faultDNSChange)
	assert.Equal(t, faultGatewayReject, order[at-1])
	assert.ElementsMatch(t, random, order, "every kind once in the round")
	assert.Equal(t, faultDNSChange, reportKinds(true)[len(faultKinds)])
}

// Every injection of the DNS fault within retractWithin of t adds two changes' dnsObserve
// to the Traefik maps' bound, and only to theirs.
func TestDNSOutage(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	f := &faults{log: []injection{
		{Kind: faultDNSChange, Start: t0.Add(5 * time.Second), End: t0.Add(9 * time.Second)},
		{Kind: faultDNSChange, Start: t0.Add(-20 * time.Second), End: t0.Add(-10 * time.Second)}, // over before t0
		{Kind: faultGatewaySlow, Start: t0, End: t0.Add(3 * time.Second)},
	}}
	assert.Equal(t, 2*dnsObserve, f.dnsOutage(t0, retractWithin))
	assert.Equal(t, 2*dnsObserve+f.outage(t0, retractWithin), f.traefikOutage(t0, retractWithin))
	assert.Equal(t, 4*dnsObserve, f.dnsOutage(t0.Add(-15*time.Second), retractWithin))
	assert.Zero(t, f.dnsOutage(t0.Add(time.Minute), retractWithin))
}

// The fault's wait for the slices: only the maps standing True count, each Service's ready
// addresses against the answer, and it names the stale ones.
func TestSliceState(t *testing.T) {
	tm := func(name string, status metav1.ConditionStatus) *v1beta1.TrafficMap {
		return &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: nsTraefik, Name: name, Generation: 2},
			Status: v1beta1.TrafficMapStatus{Conditions: []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: status, ObservedGeneration: 2}}}}
	}
	slice := func(m, svc, cluster string, addrs ...string) *discoveryv1.EndpointSlice {
		s := testSlice(svc, addrs)
		s.Namespace, s.Name = nsTraefik, svc+"-ipv4"
		s.Labels[labelSourceName], s.Labels[labelCluster] = m, cluster
		return s
	}
	kube := kubefake.NewClientset(
		slice("svc-0", "svc-0-worker-1", "worker-1", "198.18.7.3", "198.18.7.6"),
		slice("svc-1", "svc-1-worker-1", "worker-1", "198.18.7.3"),
		slice("svc-2", "svc-2-worker-1", "worker-1", "198.18.7.3"), // not True: not counted
		slice("svc-0", "svc-0-worker-0", "worker-0", "198.18.7.2"), // another cluster
	)
	ome := omefake.NewSimpleClientset(tm("svc-0", metav1.ConditionTrue), tm("svc-1", metav1.ConditionTrue), tm("svc-2", metav1.ConditionFalse))
	target := &dnsTarget{kube: kube, ome: ome, namespace: nsTraefik}
	n, stale, err := target.sliceState(context.Background(), "worker-1", []string{"198.18.7.3", "198.18.7.6"})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, []string{"svc-1-worker-1 holds [198.18.7.3]"}, stale)
	n, stale, err = target.sliceState(context.Background(), "worker-2", []string{"198.18.7.4"})
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Empty(t, stale)
}
