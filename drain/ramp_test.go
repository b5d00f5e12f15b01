package drain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/weights"
)

func TestPlanRamp(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	spec := RampSpec{Duration: 10 * time.Second, Steps: 10}
	with := func(rs ...weights.Ramp) map[string]string {
		return map[string]string{"other": "kept", weights.RampAnnotation: weights.EncodeRamps(rs)}
	}
	down := weights.Ramp{Cluster: "worker-a", Direction: weights.RampDown, Start: now.Add(-3 * time.Second), Duration: 10 * time.Second, Steps: 10, Step: 3, From: 50, Holds: []string{"m-1"}}
	up := weights.Ramp{Cluster: "worker-a", Direction: weights.RampUp, Start: now.Add(-4 * time.Second), Duration: 10 * time.Second, Steps: 10, Step: 4}

	for _, tt := range []struct {
		name        string
		annotations map[string]string
		dir         weights.RampDirection
		hold        string
		from        int32
		stillHeld   bool
		want        *weights.Ramp // nil: nothing to ramp
		wantOp      Op
	}{
		{name: "drain: a new ramp from step 0", annotations: map[string]string{}, dir: weights.RampDown, hold: "m-1", from: 50,
			want: &weights.Ramp{Cluster: "worker-a", Direction: weights.RampDown, Start: now, Duration: 10 * time.Second, Steps: 10, From: 50, Holds: []string{"m-1"}}, wantOp: OpAdd},
		{name: "drain of a cluster with no traffic: nothing to ramp", dir: weights.RampDown, hold: "m-1", from: 0},
		{name: "a second ramped drain joins the ramp under way", annotations: with(down), dir: weights.RampDown, hold: "m-0", from: 50,
			want: &weights.Ramp{Cluster: "worker-a", Direction: weights.RampDown, Start: down.Start, Duration: 10 * time.Second, Steps: 10, Step: 3, From: 50, Holds: []string{"m-0", "m-1"}}, wantOp: OpReplace},
		{name: "a drain during an up ramp turns around at the share reached", annotations: with(up), dir: weights.RampDown, hold: "m-2", from: 50,
			want: &weights.Ramp{Cluster: "worker-a", Direction: weights.RampDown, Start: now.Add(-6 * time.Second), Duration: 10 * time.Second, Steps: 10, Step: 6, From: 50, Holds: []string{"m-2"}}, wantOp: OpReplace},
		{name: "undrain: a new up ramp", dir: weights.RampUp, hold: "m-1",
			want: &weights.Ramp{Cluster: "worker-a", Direction: weights.RampUp, Start: now, Duration: 10 * time.Second, Steps: 10}, wantOp: OpAdd},
		{name: "an undrain during the down ramp turns around", annotations: with(down), dir: weights.RampUp, hold: "m-1",
			want: &weights.Ramp{Cluster: "worker-a", Direction: weights.RampUp, Start: now.Add(-7 * time.Second), Duration: 10 * time.Second, Steps: 10, Step: 7}, wantOp: OpReplace},
		{name: "undrain while another drain holds the cluster: nothing to ramp", dir: weights.RampUp, hold: "m-1", stillHeld: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlanRamp(tt.annotations, tt.dir, "worker-a", tt.hold, tt.from, tt.stillHeld, spec, now)
			require.NoError(t, err)
			if tt.want == nil {
				assert.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			assert.Equal(t, *tt.want, got.Ramp)
			assert.Equal(t, tt.wantOp, got.Op)
			stored, err := weights.ParseRamps(got.Value)
			require.NoError(t, err)
			assert.Equal(t, []weights.Ramp{*tt.want}, stored)
		})
	}

	t.Run("undrain of one of two ramped drains keeps the ramp", func(t *testing.T) {
		two := down
		two.Holds = []string{"m-1", "m-2"}
		got, err := PlanRamp(with(two), weights.RampUp, "worker-a", "m-1", 0, true, spec, now)
		require.NoError(t, err)
		assert.Equal(t, []string{"m-2"}, got.Ramp.Holds)
	})
	t.Run("undrain of the ramped drain while an unramped one holds: the ramp ends", func(t *testing.T) {
		got, err := PlanRamp(with(down), weights.RampUp, "worker-a", "m-1", 0, true, spec, now)
		require.NoError(t, err)
		assert.Equal(t, OpRemove, got.Op)
		assert.Contains(t, got.Describe(), "the ramp of worker-a ends")
	})
	t.Run("a malformed annotation is refused, not overwritten", func(t *testing.T) {
		_, err := PlanRamp(map[string]string{weights.RampAnnotation: "{"}, weights.RampDown, "worker-a", "m-1", 5, false, spec, now)
		require.ErrorIs(t, err, ErrRampAnnotation)
	})
	t.Run("bounds", func(t *testing.T) {
		for _, s := range []RampSpec{{Duration: 500 * time.Millisecond, Steps: 10}, {Duration: 25 * time.Hour, Steps: 10}, {Duration: time.Minute, Steps: 0}, {Duration: time.Minute, Steps: 101}} {
			_, err := PlanRamp(nil, weights.RampDown, "worker-a", "m-1", 5, false, s, now)
			require.ErrorIs(t, err, ErrRampDuration, "%+v", s)
		}
	})
	t.Run("the patch carries both annotations", func(t *testing.T) {
		ch, err := PlanRamp(nil, weights.RampDown, "worker-a", "m-1", 5, false, spec, now)
		require.NoError(t, err)
		p := &Plan{Target: Target{UID: "u", ResourceVersion: "7", Annotations: map[string]string{"other": "kept"}}, Op: OpAdd, Value: `{"m-1":{"cluster":"worker-a","reason":"r"}}`, Ramp: ch}
		assert.JSONEq(t, `{"metadata":{"uid":"u","resourceVersion":"7","annotations":{"ome.io/traffic-drain":"{\"m-1\":{\"cluster\":\"worker-a\",\"reason\":\"r\"}}",`+
			`"publisher.trafficmap.dev/ramp":"{\"worker-a\":{\"direction\":\"down\",\"start\":\"2026-12-03T10:00:00Z\",\"duration\":\"10s\",\"steps\":10,\"step\":0,\"from\":5,\"holds\":[\"m-1\"]}}"}}}`, string(p.Patch()))
		after := p.AnnotationsAfter()
		assert.Equal(t, "kept", after["other"])
		assert.Equal(t, ch.Value, after[weights.RampAnnotation])
	})
}
