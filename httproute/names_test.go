package httproute_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trafficmap/publisher/httproute"
)

func TestRouteName(t *testing.T) {
	tests := []struct{ mapName, want string }{
		{"chat", "chat-global"},
		{"a.b", "a-b-global-"}, // dots are sanitized, so a hash keeps it apart from "a-b"
		{"1chat", "a1chat-global-"},
		{strings.Repeat("x", 60), strings.Repeat("x", 54)},
	}
	for _, tc := range tests {
		t.Run(tc.mapName, func(t *testing.T) {
			got := httproute.RouteName(tc.mapName)
			assert.True(t, strings.HasPrefix(got, tc.want), "%s has prefix %s", got, tc.want)
			assert.Empty(t, validation.IsDNS1035Label(got))
		})
	}
	assert.NotEqual(t, httproute.RouteName("a.b"), httproute.RouteName("a-b"))
	assert.NotEqual(t, httproute.RouteName(strings.Repeat("x", 60)+"1"), httproute.RouteName(strings.Repeat("x", 60)+"2"))
}

func TestServiceNameBoundedAndCollisionFree(t *testing.T) {
	seen := map[string]string{}
	add := func(ns, name, cluster string) {
		got := httproute.ServiceName(ns, name, cluster)
		assert.Empty(t, validation.IsDNS1035Label(got), got)
		key := ns + "/" + name + "/" + cluster
		if prev, ok := seen[got]; ok {
			t.Errorf("%s and %s both map to %s", prev, key, got)
		}
		seen[got] = key
	}
	for _, ns := range []string{"prod", "staging"} {
		add(ns, "a-b", "c") // readable parts collide ("a-b-c") ...
		add(ns, "a", "b-c") // ... the hash keeps them apart
		add(ns, strings.Repeat("n", 253), "worker-a")
		add(ns, strings.Repeat("n", 253), "worker-b")
		for i := range 50 {
			add(ns, "chat", fmt.Sprintf("worker-%d.region.example", i))
		}
	}
	assert.True(t, strings.HasPrefix(httproute.ServiceName("prod", "chat", "worker-a"), "chat-worker-a-"))
}
