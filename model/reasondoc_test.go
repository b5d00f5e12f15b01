package model

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// Every typed reason and condition has its words for the reference; a new reason without
// them fails here, before docs/reference/conditions.md would miss it.
func TestReasonDescriptions(t *testing.T) {
	all := append(Reasons(), EventReasons()...)
	for _, r := range all {
		assert.NotEmpty(t, r.Description(), "reason %s has no Description (model/reasondoc.go)", r)
	}
	assert.Len(t, reasonDescriptions, len(all), "a description for a reason that Reasons and EventReasons do not list")
	for _, r := range FallbackReasons() {
		assert.NotEmpty(t, r.Description(), "fallback reason %s has no Description (model/reasondoc.go)", r)
	}
	assert.Len(t, fallbackDescriptions, len(FallbackReasons()))
	assert.Empty(t, Reason("NoSuchReason").Description())
	assert.Empty(t, FallbackReason("NoSuchReason").Description())
}

func TestConditions(t *testing.T) {
	var types []string
	for _, c := range Conditions() {
		types = append(types, c.Type)
		assert.NotEmpty(t, c.Owner, c.Type)
		assert.NotEmpty(t, c.Meaning, c.Type)
	}
	assert.ElementsMatch(t, []string{v1beta1.ConditionPublished, v1beta1.ConditionPublicationFallback, v1beta1.ConditionRoutable,
		v1beta1.ConditionOverrideActive, v1beta1.ConditionCapacityFallback}, types)
}
