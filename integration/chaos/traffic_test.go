package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// TestTrafficResults: a request is judged against the True standing when it was sent, past
// the grace and for the True's hostname; an answer from a weight-0 cluster is a lie, one
// from a positive cluster, an error status or another hostname is not.
func TestTrafficResults(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", ResourceVersion: "7"}}
	claim := &verdict{TrueAllowed: true, Hostname: "h", Weights: map[string]int32{"worker-0": 2, "worker-1": 0}}
	j := newTrafficJudge(nil, "ns", "", t.Logf)
	j.stands["ns/m"] = []*standing{
		{From: at(0), To: at(2000), Confirmed: at(1050), Map: tm, Claim: claim},
		{From: at(3000), Map: tm, Claim: &verdict{Why: "no inferenceservice"}},
	}
	ok := func(ms int, host, who string) sentRequest {
		return sentRequest{Sent: at(ms), Host: host, Who: who, Status: http.StatusOK}
	}
	j.requests["ns/m"] = []sentRequest{
		ok(100, "h", "worker-1"),   // within the grace: not judged
		ok(600, "h", "worker-0"),   // judged, fine
		ok(700, "h", "worker-1"),   // judged, a lie
		ok(800, "old", "worker-1"), // another hostname: not judged
		{Sent: at(900), Host: "h", Who: "HTTP 500", Status: http.StatusInternalServerError}, // judged, not a lie
		ok(1000, "h", "worker-9"), // a cluster the map does not have: a lie
		ok(1100, "h", "worker-1"), // after the last confirmation: unconfirmed, not judged
		ok(2500, "h", "worker-1"), // no True stands
		ok(3600, "h", "worker-1"), // the True allows nothing: not judged
		{Sent: at(3700), Host: "h", Err: "connection refused"},
	}
	res := j.Results()
	assert.Equal(t, 10, res.Requests)
	assert.Equal(t, 4, res.Judged)
	assert.Equal(t, 1, res.Unconfirmed)
	assert.Equal(t, 2, res.Excluded)
	assert.Equal(t, 1, res.ServerErr)
	assert.Equal(t, 1, res.Failed)
	assert.Equal(t, 2, res.Trues)
	require.Len(t, res.Lies, 2)
	assert.Equal(t, "worker-1", res.Lies[0].Request.Who)
	assert.Equal(t, "worker-9", res.Lies[1].Request.Who)
	assert.Contains(t, res.Lies[0].Timeline, "request host h -> worker-1")
}

// TestSameTrue: a stretch is confirmed only by the very True it saw; a False, a new True
// (another transition time, message or generation) or a map without the condition is not it.
func TestSameTrue(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	mk := func(gen int64, status metav1.ConditionStatus, msg string, ltt metav1.Time) *v1beta1.TrafficMap {
		tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Generation: gen}}
		tm.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: status, Reason: "Published",
			Message: msg, ObservedGeneration: gen, LastTransitionTime: ltt}}
		return tm
	}
	seen := mk(3, metav1.ConditionTrue, "m", t1)
	for name, tc := range map[string]struct {
		live *v1beta1.TrafficMap
		want bool
	}{
		"the same True":      {mk(3, metav1.ConditionTrue, "m", t1), true},
		"False":              {mk(3, metav1.ConditionFalse, "m", t1), false},
		"a new transition":   {mk(3, metav1.ConditionTrue, "m", metav1.NewTime(t1.Add(time.Second))), false},
		"another message":    {mk(3, metav1.ConditionTrue, "n", t1), false},
		"another generation": {mk(4, metav1.ConditionTrue, "m", t1), false},
		"no condition":       {&v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Generation: 3}}, false},
	} {
		t.Run(name, func(t *testing.T) { assert.Equal(t, tc.want, sameTrue(seen, tc.live)) })
	}
}
