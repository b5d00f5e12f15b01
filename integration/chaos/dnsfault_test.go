package main

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
	assert.Equal(t, 2*dnsObserve, f.dnsOutage(t0))
	assert.Equal(t, 2*dnsObserve+f.outage(t0), f.traefikOutage(t0))
	assert.Equal(t, 4*dnsObserve, f.dnsOutage(t0.Add(-15*time.Second)))
	assert.Zero(t, f.dnsOutage(t0.Add(time.Minute)))
}
