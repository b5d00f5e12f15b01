package publish

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{Gateway: types.NamespacedName{Namespace: "prod", Name: "global"}}
	tests := []struct {
		name   string
		change func(*Config)
		want   []string // substrings of the error; none means valid
	}{
		{"minimal", func(*Config) {}, nil},
		{"gateway without namespace", func(c *Config) { c.Gateway.Namespace = "" }, nil},
		{"everything", func(c *Config) {
			c.GatewaySection, c.HostTemplate, c.NoPositivePolicy = "https", "{{.Service}}.{{.Namespace}}.example.com", RetainLastPositive
			c.Namespaces = []string{"prod", "staging"}
		}, nil},
		{"no gateway", func(c *Config) { c.Gateway = types.NamespacedName{} }, []string{"--gateway is required"}},
		{"bad gateway name", func(c *Config) { c.Gateway.Name = "Global_GW" }, []string{`--gateway name "Global_GW"`}},
		{"bad gateway namespace", func(c *Config) { c.Gateway.Namespace = "a.b" }, []string{`--gateway namespace "a.b"`}},
		{"bad policy", func(c *Config) { c.NoPositivePolicy = "Keep" }, []string{`--no-positive-policy "Keep": must be ApplyCurrent or RetainLastPositive`}},
		{"bad template", func(c *Config) { c.HostTemplate = "{{.Service" }, []string{"--host-template"}},
		{"bad namespace", func(c *Config) { c.Namespaces = []string{"Prod"} }, []string{`--namespace "Prod"`}},
		{"take over from another publisher", func(c *Config) { c.TakeOverFrom = "gatewayapi" }, nil},
		{"take over from itself", func(c *Config) { c.TakeOverFrom = DefaultFieldManager }, []string{`--take-over-from "trafficmap-publisher" is this publisher's own name`}},
		{"take over from its own --publisher-name", func(c *Config) { c.PublisherName, c.TakeOverFrom = "edge", "edge" }, []string{`--take-over-from "edge"`}},
		{"all problems at once", func(c *Config) { c.Gateway = types.NamespacedName{}; c.NoPositivePolicy = "x" },
			[]string{"--gateway is required", "--no-positive-policy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.change(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	var c Config
	c.setDefaults()
	assert.Equal(t, ApplyCurrent, c.NoPositivePolicy)
	assert.Equal(t, DefaultFieldManager, c.FieldManager)
	assert.Equal(t, 2, c.Workers)
	assert.Positive(t, c.ResyncPeriod)
}

// Each publisher name has its own field manager (managedFields tell two publishers apart);
// the default name keeps the manager earlier versions wrote with, and an explicit
// FieldManager stays as given (it also names the publisher then).
func TestFieldManagerFollowsPublisherName(t *testing.T) {
	for _, tc := range []struct {
		name           string
		cfg            Config
		manager, named string
	}{
		{"default", Config{}, "trafficmap-publisher", "trafficmap-publisher"},
		{"default name given", Config{PublisherName: DefaultFieldManager}, "trafficmap-publisher", "trafficmap-publisher"},
		{"another name", Config{PublisherName: "pub-a"}, "trafficmap-publisher/pub-a", "pub-a"},
		{"explicit manager", Config{FieldManager: "pub-b"}, "pub-b", "pub-b"},
		{"both", Config{FieldManager: "m", PublisherName: "pub-c"}, "m", "pub-c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.setDefaults()
			assert.Equal(t, tc.manager, c.FieldManager)
			assert.Equal(t, tc.named, c.publisherName())
		})
	}
}
