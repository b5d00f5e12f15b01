package publish

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// A gradual drain: every step is published and in place before the publisher stores the
// next one, Published says Ramping throughout and True only at the drain's weights; a step
// that is not in place holds the ramp.
func TestReconcileRamp(t *testing.T) {
	route, xds := inPlace("route stored"), inPlace("xds ACKed")
	f := newFixture(t, route, xds)
	start := f.clock
	ramp := weights.Ramp{Cluster: "worker-a", Direction: weights.RampDown, Start: start, Duration: 4 * time.Second, Steps: 4, From: 1, Holds: []string{"m-1"}}
	f.inputs.annotations = map[string]string{
		weights.DrainAnnotation: `{"m-1":{"cluster":"worker-a","reason":"maintenance"}}`,
		weights.RampAnnotation:  weights.EncodeRamps([]weights.Ramp{ramp}),
	}
	f.inputs.cachedRV, f.inputs.liveRV = "10", "10"

	hold, err := f.run(t)
	require.NoError(t, err)
	c := f.published()
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(model.ReasonRamping), c.Reason)
	assert.Equal(t, "ramping worker-a down: step 0 of 4 in place, 100% of its weight (4 of 4); next step due 1970-01-01T00:16:41Z, 0% at 1970-01-01T00:16:44Z; "+
		"route stored; xds ACKed; weights worker-a=4 (drained by m-1), worker-b=4", c.Message)
	assert.Equal(t, time.Second, hold, "reconciled again when step 1 is due")
	assert.Empty(t, f.inputs.rampWrites, "step 1 is not due yet")
	assert.Contains(t, f.event(), "Normal Ramping ramping worker-a down: step 0 of 4 in place")

	var weightsSeen []int32
	for i := 1; i <= 4; i++ {
		f.clock = start.Add(time.Duration(i) * time.Second)
		_, err = f.run(t) // the step is due and the last one is in place: the next is stored
		require.NoError(t, err)
		require.Len(t, f.inputs.rampWrites, i)
		if i == 1 {
			assert.Contains(t, f.event(), "Normal RampStarted ramp of worker-a down started: 4 steps over 4s")
		}
		_, err = f.run(t) // the informer's event: the stored step is published
		require.NoError(t, err)
		last := route.applied[len(route.applied)-1]
		weightsSeen = append(weightsSeen, last.Result.Entries[0].Effective)
		if i < 4 {
			assert.Equal(t, string(model.ReasonRamping), f.published().Reason, "step %d", i)
		}
	}
	assert.Equal(t, []int32{3, 2, 1, 0}, weightsSeen, "strictly decreasing, then the drain's 0")
	assert.Empty(t, f.inputs.rampWrites[3], "the finished ramp is removed")
	assert.Equal(t, "Normal RampFinished ramp of worker-a down finished: step 4 of 4 is the drain's weights", f.event())
	assert.Empty(t, f.event(), "the ramp's end is RampFinished, Published after Ramping is no news")
	c = f.published()
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, "route stored; xds ACKed; weights worker-a=0 (drained by m-1), worker-b=1", c.Message)
}

func TestReconcileRampWaitsForEverySink(t *testing.T) {
	route := inPlace("route stored")
	xds := &fakeSink{name: "xds", conf: model.Confirmation{State: model.Pending, Message: "waiting for 1/2 xds clients to ACK"}}
	f := newFixture(t, route, xds)
	ramp := weights.Ramp{Cluster: "worker-a", Direction: weights.RampDown, Start: f.clock, Duration: 4 * time.Second, Steps: 4, Step: 1, From: 1, Holds: []string{"m-1"}}
	f.inputs.annotations = map[string]string{
		weights.DrainAnnotation: `{"m-1":{"cluster":"worker-a","reason":"maintenance"}}`,
		weights.RampAnnotation:  weights.EncodeRamps([]weights.Ramp{ramp}),
	}
	f.inputs.cachedRV, f.inputs.liveRV = "10", "10"
	f.clock = f.clock.Add(time.Hour) // every step long overdue
	_, err := f.run(t)
	require.NoError(t, err)
	assert.Empty(t, f.inputs.rampWrites, "step 1 is not in place on the xds sink: step 2 waits")
	c := f.published()
	assert.Equal(t, string(model.ReasonRamping), c.Reason)
	assert.True(t, strings.HasPrefix(c.Message, "ramping worker-a down: publishing step 1 of 4, 75% of its weight (3 of 4); next step due "), c.Message)
	assert.Contains(t, c.Message, "waiting for 1/2 xds clients to ACK")

	xds.conf = model.Confirmation{State: model.InPlace, Message: "xds ACKed"}
	f.inputs.liveRV = "11" // someone else wrote the InferenceService since the cache was read
	hold, err := f.run(t)
	require.NoError(t, err)
	assert.Empty(t, f.inputs.rampWrites, "a conflict stores nothing")
	assert.Equal(t, sourceRetry, hold)

	f.inputs.cachedRV = "11"
	_, err = f.run(t)
	require.NoError(t, err)
	require.Len(t, f.inputs.rampWrites, 1)
	next, err := weights.ParseRamps(f.inputs.rampWrites[0])
	require.NoError(t, err)
	assert.Equal(t, 2, next[0].Step, "one step at a time, even when behind the schedule")
}

func TestReconcileInvalidRampKeepsWhatIsPublished(t *testing.T) {
	route := inPlace("route stored")
	f := newFixture(t, route)
	f.inputs.annotations = map[string]string{weights.RampAnnotation: `{"worker-a":{"direction":"sideways"}}`}
	_, err := f.run(t)
	require.NoError(t, err)
	c := f.published()
	assert.Equal(t, string(model.ReasonInvalidRamp), c.Reason)
	assert.Contains(t, c.Message, `inferenceservice prod/chat annotation publisher.trafficmap.dev/ramp: invalid ramp annotation publisher.trafficmap.dev/ramp: cluster worker-a: direction "sideways" must be "down" or "up"`)
	assert.Empty(t, route.applied, "nothing is published")
}

// The last step: once the ramp is removed, the drain's weights are still being published;
// Published stays Ramping (not Publishing) until they are in place, then turns True.
func TestReconcileRampLastStepSaysRamping(t *testing.T) {
	route := &fakeSink{name: "route", conf: model.Confirmation{State: model.InPlace, Message: "route accepted"}}
	f := newFixture(t, route)
	ramp := weights.Ramp{Cluster: "worker-a", Direction: weights.RampDown, Start: f.clock, Duration: 2 * time.Second, Steps: 2, Step: 1, From: 1, Holds: []string{"m-1"}}
	f.inputs.annotations = map[string]string{
		weights.DrainAnnotation: `{"m-1":{"cluster":"worker-a","reason":"maintenance"}}`,
		weights.RampAnnotation:  weights.EncodeRamps([]weights.Ramp{ramp}),
	}
	f.inputs.cachedRV, f.inputs.liveRV = "10", "10"
	_, err := f.run(t)
	require.NoError(t, err)
	require.Equal(t, string(model.ReasonRamping), f.published().Reason)

	f.clock = f.clock.Add(2 * time.Second)
	_, err = f.run(t) // step 1 is in place and the end is due: the ramp is removed
	require.NoError(t, err)
	require.Equal(t, []string{""}, f.inputs.rampWrites)
	route.conf = model.Confirmation{State: model.Pending, Message: "waiting for gateway prod/g"}
	f.clock = f.clock.Add(progressInterval)
	_, err = f.run(t)
	require.NoError(t, err)
	c := f.published()
	assert.Equal(t, string(model.ReasonRamping), c.Reason)
	assert.Equal(t, "no ramp shapes the weights any more, publishing where it ends; waiting for gateway prod/g", c.Message)

	route.conf = model.Confirmation{State: model.InPlace, Message: "route accepted"}
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)
}
