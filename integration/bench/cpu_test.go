package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// perMap divides the cold start's requests by the maps, the most first, leaves out what
// rounds to nothing, and counts the gateway's route status writes apart.
func TestPerMap(t *testing.T) {
	before := map[string]float64{"APPLY services": 100, "GET httproutes": 5, "WATCH services": 3}
	after := map[string]float64{"APPLY services": 900, "GET httproutes": 6, "WATCH services": 3,
		"APPLY trafficmaps/status": 200, "UPDATE httproutes/status": 110, "GET httproutes/status": 4, "POST events": 100}
	requests, status := perMap(before, after, 100)
	assert.Equal(t, "APPLY services 8.00, APPLY trafficmaps/status 2.00, POST events 1.00, GET httproutes/status 0.04, GET httproutes 0.01", requests)
	assert.Equal(t, 110, status)
}
