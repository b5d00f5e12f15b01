package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestOutage: a fault within the window adds its length, and leaderChange more when it may
// have changed the leader; a leader change's aftermath reaches past the fault's end, a
// fault that changed no leader does not.
func TestOutage(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for name, tc := range map[string]struct {
		in   injection
		want time.Duration
	}{
		"a kill within the window":                                   {injection{Kind: faultLeaderKill, Start: at(2), End: at(7)}, 5*time.Second + leaderChange},
		"a kill over 10 s before t":                                  {injection{Kind: faultPublisherKill, Start: at(-15), End: at(-10)}, 5*time.Second + leaderChange},
		"a kill whose aftermath is over":                             {injection{Kind: faultLeaderKill, Start: at(-60), End: at(-55)}, 0},
		"a short API stall within the window":                        {injection{Kind: faultAPIStall, Start: at(1), End: at(2)}, time.Second},
		"a short API stall over before t":                            {injection{Kind: faultAPIStall, Start: at(-3), End: at(-2)}, 0},
		"an API restart past the renew deadline, over 29 s before t": {injection{Kind: faultAPIRestart, Start: at(-35), End: at(-29)}, 6*time.Second + leaderChange},
		"a follower's partition":                                     {injection{Kind: faultAPIPartition, Start: at(1), End: at(3)}, 2 * time.Second},
		"the leader's partition over before t":                       {injection{Kind: faultAPIPartition, Start: at(-5), End: at(-3), Leader: true}, 2*time.Second + leaderChange},
		"a fault past the window":                                    {injection{Kind: faultLeaderKill, Start: t0.Add(retractWithin + time.Second), End: at(100)}, 0},
		"a fault that is no outage":                                  {injection{Kind: faultGatewaySlow, Start: at(1), End: at(5)}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			f := &faults{log: []injection{tc.in}}
			assert.Equal(t, tc.want, f.outage(t0, retractWithin))
		})
	}
}

// TestStuckBound: the stuck bound is stuckWithin plus the outages that begin within
// retractWithin of the start or whose aftermath reaches into it; a later one does not count.
func TestStuckBound(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	stall := func(s int) injection { return injection{Kind: faultAPIStall, Start: at(s), End: at(s + 1)} } // 1 s, no leader change
	kill := func(s int) injection { return injection{Kind: faultLeaderKill, Start: at(s), End: at(s + 2)} }
	for name, tc := range map[string]struct {
		log  []injection
		want time.Duration
	}{
		"no fault":                         {nil, stuckWithin},
		"a stall within the window":        {[]injection{stall(10)}, stuckWithin + time.Second},
		"two leader changes in the window": {[]injection{kill(4), kill(25)}, stuckWithin + 2*(2*time.Second+leaderChange)},
		"a leader change before the start": {[]injection{kill(-20)}, stuckWithin + 2*time.Second + leaderChange},
		"a leader change past the window":  {[]injection{stall(3), kill(31)}, stuckWithin + time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			f := &faults{log: tc.log}
			assert.Equal(t, tc.want, stuckBound(t0, f.outage))
		})
	}
}
