package model

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/api/v1beta1"
)

func TestJournalContents(t *testing.T) {
	tm := &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Service: "chat"}}
	tm.Name, tm.Namespace = "chat", "prod"
	j, err := JournalOf(tm, "edge", OptionsDigest([]string{"b=2", "a=1"}), []string{"Chat.Example.com.", "chat.prod", "chat.example.com"})
	require.NoError(t, err)
	assert.Equal(t, "edge", j.PublisherName)
	assert.Equal(t, []string{"grpc:chat.prod", "hostname:chat.example.com"}, j.ClaimedTargets, "typed, normalized, sorted, unique")
	assert.Equal(t, OptionsDigest([]string{"a=1", "b=2"}), j.ObservedOptionsDigest, "the options' order does not matter")
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, j.ObservedOptionsDigest)

	tm.Status.Publisher = j
	assert.Equal(t, []string{"chat.example.com", "chat.prod"}, JournaledNames(tm, "edge"))
	assert.Empty(t, JournaledNames(tm, "other"), "another publisher's journal holds nothing here")
	assert.Equal(t, []string{"chat.example.com", "chat.prod"}, JournaledNames(tm, ""))

	j, err = JournalOf(tm, "edge", "", nil)
	require.NoError(t, err)
	assert.Nil(t, j.ClaimedTargets, "omitted, never empty")

	many := make([]string, maxJournalTargets+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example.com", i)
	}
	_, err = JournalOf(tm, "edge", "", many)
	var ue *UserError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, ue.Message, "trafficmap prod/chat would claim 129 names in status.publisher.claimedTargets, more than the 128 allowed")
	_, err = JournalOf(tm, "edge", "", []string{strings.Repeat("a", 510) + ".com"})
	require.ErrorAs(t, err, &ue)
}
